package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"golang.org/x/sync/singleflight"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// ReplayedHeader marks a response that idemgate answered from the store.
const ReplayedHeader = "Idempotent-Replayed"

// ExpiresHeader carries, on routes with advertise_expiry, when the record
// of the request's key ends: until then a retry with the key is answered
// from the record; after it, the key is new. The Idempotency-Key draft
// names no such field: its issue tracker proposes a response field for the
// retention (ietf-wg-httpapi/idempotency#35, unnamed) and an
// Idempotency-TTL in seconds (#49), which a replay would have to recompute
// and a client could only read relative to an answer it may never have
// received. An absolute HTTP-date, named after the request field it
// qualifies and after Expires (RFC 9111 section 5.3), avoids both; docs/configuration.md
// documents the choice.
const ExpiresHeader = "Idempotency-Key-Expires"

// DefaultStoreTimeout bounds one store operation when Options.StoreTimeout is 0.
const DefaultStoreTimeout = 2 * time.Second

// Options configure a Proxy. Upstream, Store and Policy are required.
type Options struct {
	// Upstream is the absolute http(s) URL every request is sent to; its
	// path is prefixed to the request path.
	Upstream *url.URL
	// Timeout bounds one enforced upstream exchange (headers and body);
	// past it the client gets 504 and the claim is kept until its lease
	// ends. 0 means 60 s.
	Timeout time.Duration
	// Store keeps the idempotency records.
	Store store.Store
	// Policy returns the policy in force; it is called once per request so a
	// reload never changes the rules under a request in flight.
	Policy func() *policy.Policy
	// Transport sends upstream requests. Nil means a dedicated
	// http.Transport that never retries and never decompresses.
	Transport http.RoundTripper
	// StoreTimeout bounds one store operation; 0 means DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Logger receives one line per enforced request; nil discards.
	Logger *slog.Logger
	// Metrics records counters and histograms; nil records nothing.
	Metrics *metrics.Metrics
	// NewToken returns a unique claim token; nil means 128 random bits in hex.
	NewToken func() string
	// V1Lookup makes a new key look for a record of layout 1, which was
	// scoped by route name (docs/protocol.md, "Layout versions"), before
	// the request is forwarded: one more store read per fresh key, so that
	// operations completed before an upgrade still replay. Turn it off once
	// the longest retention has passed since the upgrade.
	V1Lookup bool
	// Problems publishes the problem responses: type URIs under the
	// operator's base and a Link to their documentation (config section
	// problems:); the zero value writes idemgate's own.
	Problems problem.Publisher
	// PreviousPolicies, when set, returns the policies in force before the
	// current one in this process (reload.Reloader.Previous). With V1Lookup
	// a fresh key also looks for a layout 1 record under the route names
	// those policies gave the request, so a reload that renames a route
	// does not hide the records written under its old name.
	PreviousPolicies func() []*policy.Policy
	// TrustedProxies are the peers (load balancers) whose X-Forwarded-For
	// and Forwarded fields are appended to; anyone else's are replaced
	// (forwardingHeaders). Nil trusts nobody.
	TrustedProxies []netip.Prefix
	// PassHost sends the client's Host to the upstream instead of the
	// upstream URL's host (upstream.pass_host), and so makes the host part
	// of the key scope of routes whose pattern names none
	// (identity.Scoping). With Next it is not read: the handler always sees
	// the client's Host, so the host is always part of that scope.
	PassHost bool
	// NoAccessLog turns the per-request line off (log.access: false);
	// failures are still logged as warnings.
	NoAccessLog bool
	// NoLogQuery logs the access line's path without its query string
	// (log.query: false), for APIs whose query strings carry secrets.
	NoLogQuery bool
	// MaxWaiters caps the requests of this Proxy that wait on a running
	// record at once (server.max_waiters); past it a duplicate gets 409
	// request-in-progress with Retry-After at once instead of holding a
	// goroutine and a connection. 0 (or a negative value) means no cap, as
	// server.max_waiters: 0 does, so the config's value is passed as it is;
	// the default cap is config.DefaultMaxWaiters(), which config.Load puts
	// in server.max_waiters when the file leaves it out.
	MaxWaiters int
	// MaxStoreWaiting bounds the keyed requests of this Proxy that wait
	// for a store answer to their claim at once (server.max_store_waiting);
	// past it a new keyed request gets 503 overloaded with Retry-After at
	// once, and nothing is claimed or forwarded, instead of queueing for
	// the store until its timeout. 0 or a negative value means no bound;
	// config derives the default from the store's pool
	// (config.DefaultMaxStoreWaiting).
	MaxStoreWaiting int
	// Next, when set, takes the place of the upstream: the engine in
	// process (package middleware), whose contract with Next is the
	// proxy's with an upstream (see next.go): a claimed request runs it
	// once, on the request's goroutine, detached from the client and
	// bounded by Timeout; its response is captured and decided as an
	// upstream's; a panic keeps the claim (the handler may have acted) and
	// goes on; NothingDone and OutcomeUnknown let it say what its answer
	// cannot. Requests no route enforces go to it as they came, and so
	// does a request inside another engine's call of it (nesting). Upstream, Transport and PassHost are
	// then not used: the handler sees the client's Host, as an upstream
	// with PassHost does, and may serve each host as another tenant (a
	// ServeMux's host patterns, Caddy's sites), so the request's host joins
	// the key scope of routes whose pattern names none, as with PassHost.
	Next http.Handler
	// StoreDown, when set, reports that the store's connector considers
	// the store unreachable now (lazy.Connector.Down: the state behind
	// /readyz and idemgate_store_up). While it does, keyed requests are
	// answered at once, without a store call, as a failed claim is: 503
	// store-unavailable with Retry-After (fail closed), or forwarded
	// unprotected on routes with on_store_error: fail_open; otherwise
	// each would wait for the store timeout, and a fleet retrying through
	// an outage would hold that many goroutines and connections. A
	// completed record in the store's replay cache is not replayed then
	// either (docs/operations.md, "Store outages"). Nil: never down.
	StoreDown func() bool
	// H2C says the listener serves HTTP/2 without TLS (server.h2c); it
	// only words the answer to an HTTP/2 preface read as a request
	// (refuseForm).
	H2C bool
}

// Proxy is an http.Handler that enforces idempotency in front of one
// upstream. Create it with New.
type Proxy struct {
	upstream     *url.URL
	timeout      time.Duration
	store        store.Store
	policy       func() *policy.Policy
	transport    http.RoundTripper
	storeTimeout time.Duration
	log          *slog.Logger
	m            *metrics.Metrics
	newToken     func() string
	v1Lookup     bool
	previous     func() []*policy.Policy
	trusted      []netip.Prefix
	passHost     bool
	scoping      identity.Scoping
	access       bool
	logQuery     bool
	requestIDs   *requestIDs
	problems     problem.Publisher
	draining     atomic.Bool
	passthrough  *httputil.ReverseProxy
	waits        singleflight.Group
	pending      pending
	health       storeHealth
	slots        waiterSlots
	admission    storeAdmission
	h2c          bool
	storeDown    func() bool
	downWarned   atomic.Int64 // unix nanoseconds of the last store-down warning
	// ownerChecks joins the checks of one owner record (ownerrecord.go);
	// ownerToken is the token of this proxy's claims of owner records,
	// one for all, so a check retried after a lost reply finds its own
	// claim (store contract rule 1).
	ownerChecks    singleflight.Group
	ownerTokenOnce sync.Once
	ownerToken     string
	// conflictsLogged is when each owner conflict was last logged, by
	// scope and owner form; ownersPassed are the owner records this proxy
	// has checked, weakly held (a reload drops its policy's), for
	// NoteStoreFailure to check again.
	conflictsMu     sync.Mutex
	conflictsLogged map[string]time.Time
	ownersPassed    []weak.Pointer[policy.OwnerRecord]
	// ownersForgotten counts forgetOwnerRecords calls: a check begun
	// before one does not mark its record checked.
	ownersForgotten uint64
	// next is Options.Next: nil for the standalone proxy.
	next http.Handler
}

// New returns a Proxy for opts. It returns an error when Upstream (unless
// Next is set), Store or Policy is missing or Upstream is not an absolute
// http(s) or h2c URL.
func New(opts Options) (*Proxy, error) {
	// In process the handler sees the client's Host whatever PassHost
	// says, so the host is in the scope, as the proxy's with PassHost
	// (TestSecurityInProcessHostsNeverShareRecords, TestCaddySitesNeverShareRecords):
	// one scope for all hosts answered tenant t2 with t1's record.
	scoping := identity.Scoping{PassHost: opts.PassHost || opts.Next != nil}
	if opts.Next != nil {
		opts.Upstream, opts.Transport, opts.PassHost = nil, handlerTransport{next: opts.Next}, false
	} else if opts.Upstream == nil || (opts.Upstream.Scheme != "http" && opts.Upstream.Scheme != "https" && opts.Upstream.Scheme != policy.SchemeH2C) || opts.Upstream.Host == "" {
		return nil, errors.New("proxy: upstream must be an absolute http, https or h2c URL")
	}
	if opts.Store == nil {
		return nil, errors.New("proxy: store is required")
	}
	if opts.Policy == nil {
		return nil, errors.New("proxy: policy is required")
	}
	p := &Proxy{
		upstream:     opts.Upstream,
		timeout:      opts.Timeout,
		store:        opts.Store,
		policy:       opts.Policy,
		transport:    opts.Transport,
		next:         opts.Next,
		storeTimeout: opts.StoreTimeout,
		log:          opts.Logger,
		m:            opts.Metrics,
		newToken:     opts.NewToken,
		v1Lookup:     opts.V1Lookup,
		previous:     opts.PreviousPolicies,
		trusted:      opts.TrustedProxies,
		passHost:     opts.PassHost,
		scoping:      scoping,
		access:       !opts.NoAccessLog,
		logQuery:     !opts.NoLogQuery,
		requestIDs:   newRequestIDs(),
		problems:     opts.Problems,
		h2c:          opts.H2C,
		storeDown:    opts.StoreDown,
	}
	if p.timeout <= 0 {
		p.timeout = 60 * time.Second
	}
	if p.slots.max = int64(opts.MaxWaiters); p.slots.max <= 0 {
		p.slots.max = math.MaxInt64
	}
	if p.admission.max = int64(opts.MaxStoreWaiting); p.admission.max <= 0 {
		p.admission.max = math.MaxInt64
	}
	if p.storeTimeout <= 0 {
		p.storeTimeout = DefaultStoreTimeout
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.newToken == nil {
		p.newToken = randomToken
	}
	if p.transport == nil {
		p.transport = NewTransport(p.timeout)
	}
	p.transport = timedTransport{next: p.transport}
	p.passthrough = &httputil.ReverseProxy{
		Rewrite:        p.rewritePassthrough,
		Transport:      p.transport,
		FlushInterval:  passthroughFlushInterval,
		BufferPool:     newBufferPool(),
		ErrorHandler:   p.passthroughError,
		ModifyResponse: p.modifyPassthrough,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// passthroughFlushInterval is the passthrough ReverseProxy's FlushInterval:
// how long at most the bytes of a response with a Content-Length wait in
// net/http's write buffer before they are flushed to the client. Event
// streams and bodies of unknown length (chunked) are flushed on every write
// whatever it is: ReverseProxy overrides it to -1 for them, so they reach
// the client as they come. It was -1 for every response, and for that
// httputil starts, per response, a timer that fires at once and flushes the
// header from a goroutine of its own while the body is being copied: a
// goroutine and usually one more write(2) and TCP segment per request (the
// header and the body apart), 7 % of idemgate's CPU on the passthrough
// benchmark (docs/performance.md, "Hot path targets"). With a positive
// interval a response whose body is already there leaves in one write when
// the handler returns, and a slow one trickles out at most this late.
const passthroughFlushInterval = 10 * time.Millisecond

// NewTransport returns the upstream transport idemgate uses by default:
// HTTP/1.1 and HTTP/2 with keep-alive (up to 256 idle connections to each
// upstream host, with no limit across hosts), no transparent decompression
// (bodies are stored and replayed as the upstream sent them) and a response
// header timeout of timeout.
func NewTransport(timeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	t.MaxIdleConnsPerHost = 256
	// No cap across hosts: DefaultTransport's 100 made the 256 above
	// unreachable, so past 100 requests in flight to one upstream every
	// answer closed a connection and a later request dialled a new one
	// (a TCP handshake and a TIME_WAIT socket per request). Each upstream
	// host keeps at most MaxIdleConnsPerHost.
	t.MaxIdleConns = 0
	t.ResponseHeaderTimeout = timeout
	registerH2C(t)
	return t
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// rewrite is the single place that shapes an outbound request, for both the
// passthrough ReverseProxy and the enforced path: target URL, Host (the
// upstream's, or the client's with PassHost), and the forwarding fields
// (forwardingHeaders: appended to from trusted proxies, replaced from
// anyone else).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	target := p.upstream
	if ex := exchangeOf(pr.In.Context()); ex != nil && ex.route.Upstream != nil {
		target = ex.route.Upstream
	}
	pr.SetURL(target)
	pr.Out.Host = hostFor(pr.In, p.passHost)
	forwardingHeaders(pr, p.trusted)
}

// rewritePassthrough is the passthrough ReverseProxy's Rewrite: rewrite,
// and a body already in memory (bufferSmallBody, or read for the decision)
// sent as such. ReverseProxy wraps the request's body in a reader of its
// own, which net/http's transport cannot tell is in memory, so it would
// flush the header alone first.
func (p *Proxy) rewritePassthrough(pr *httputil.ProxyRequest) {
	p.rewrite(pr)
	if ex := exchangeOf(pr.In.Context()); ex != nil && ex.read && len(ex.body) > 0 {
		pr.Out.Body = io.NopCloser(bytes.NewReader(ex.body))
	}
}

// exchange is the state of one request on its way through ServeHTTP.
type exchange struct {
	start time.Time
	ctx   exchangeCtx // the context of r, the request as the upstream gets it
	// sent is the URL the client sent, when a handler in front of this
	// engine in process rewrote r's (sentURL); the fingerprint takes the
	// path and query from it (fingerprint.SentURLKey). Nil otherwise, and
	// always in the standalone proxy.
	sent *url.URL
	// next is the handler of this request in process (Options.Next, or
	// ServeNext's), nil in the standalone proxy.
	next http.Handler
	// hostAnswers is set by HostAnswers: next returned an error its host
	// answers, so having written nothing is not net/http's implicit 200.
	hostAnswers bool
	route       *policy.Route
	id          store.Identity
	fp          string
	recipe      string // how fp was computed: the route's recipe, or the record's
	body        []byte
	read        bool // body holds the request body (readBody)
	// bodyReader reads body to the upstream (readBody).
	bodyReader bytes.Reader
	// completing is when this request started recording its response
	// (forward): no earlier than the store's completion time, so the
	// expiry advertised in the first answer is never later than the
	// record's (advertise_expiry).
	completing time.Time
	// plan is the policy's answer for this request (policy.Plan): its
	// route, tombstones, key, owner, identity and fingerprint, each
	// computed once.
	plan policy.Plan
	// waited is the completed record that this request's last wait
	// ended on (wait.go), answered as the next claim's Completed answer;
	// shared with the other waiters of this process, so read only.
	waited *store.Record
	// r is the request as ServeHTTP hands it on, with the exchange in
	// its context (exchangeOf): the upstream's view (upstreamView), or
	// for a passthrough the request with its header as it came
	// (passthroughRequest).
	r *http.Request
	// cameHeader is the request's header as it came when the upstream's
	// view has a header of its own (upstreamView), else nil.
	cameHeader http.Header
	// waitUntil is when this request stops waiting, set by its first wait
	// (wait.go).
	waitUntil time.Time
	// requestID is the request's X-Request-Id (requestid.go);
	// requestIDField the value slice of the field when idemgate set it.
	requestID      string
	requestIDField [1]string
	outcome        string
	status         int
	accessFields
	// aw is accessFields.w's storage: one allocation per request for both.
	aw accessWriter
	// replayValues holds the values of a replay's header fields
	// (ownValues): a usual response's fit.
	replayValues [8]string
	// cacheCall is the context of the first replay cache read (cacheCtx),
	// held here for the same reason; cacheCallUsed once it was handed out.
	cacheCall     storeCall
	cacheCallUsed bool
}

// passthroughRequest returns the request a passthrough sends on, and
// makes it ex's: the upstream's view (its context carries the exchange,
// its body is a body already read) with the header as it came, whose
// hop-by-hop fields httputil.ReverseProxy handles itself (it keeps a
// protocol switch's Upgrade and "Te: trailers") and a handler in process
// gets as they came.
func (ex *exchange) passthroughRequest() *http.Request {
	if ex.cameHeader == nil {
		return ex.r
	}
	pr := ex.r.WithContext(ex.r.Context())
	pr.Header = ex.cameHeader
	ex.r = pr
	return pr
}

// storeCtx bounds one store call. It is detached from the client: a claim or
// a record written halfway because the client left would only cost a lease.
// Its timer is armed only for a caller that waits on Done (storeCall). The
// caller ends it with its cancel method, which costs no closure of its own
// as a CancelFunc would.
func (p *Proxy) storeCtx(parent context.Context) *storeCall {
	return newStoreCall(parent, time.Now().Add(p.storeTimeout))
}

// isUpgrade reports whether r is a protocol switch the way a WebSocket
// handshake is one (RFC 6455 section 4.1): a GET with an Upgrade field and
// the "upgrade" token in Connection (RFC 9110 section 7.8). Its response is
// a stream nobody can replay, so it passes through unclaimed. An Upgrade
// field on any other request is an ordinary hop-by-hop field: honouring it
// let a client skip the route's enforcement, required keys included, by
// adding one header.
func isUpgrade(r *http.Request) bool {
	if r.Method != http.MethodGet || r.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range r.Header["Connection"] {
		for _, token := range strings.Split(v, ",") {
			if strings.EqualFold(textproto.TrimString(token), "upgrade") {
				return true
			}
		}
	}
	return false
}
