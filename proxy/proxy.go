// Package proxy is the idempotency-enforcing reverse proxy: it forwards each operation once and answers retries from the store.
package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// ReplayedHeader marks a response that idemgate answered from the store.
const ReplayedHeader = "Idempotent-Replayed"

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
	draining     atomic.Bool
	passthrough  *httputil.ReverseProxy
	waits        singleflight.Group
	pending      pending
}

// New returns a Proxy for opts. It returns an error when Upstream, Store or
// Policy is missing or Upstream is not an absolute http(s) URL.
func New(opts Options) (*Proxy, error) {
	if opts.Upstream == nil || (opts.Upstream.Scheme != "http" && opts.Upstream.Scheme != "https") || opts.Upstream.Host == "" {
		return nil, errors.New("proxy: upstream must be an absolute http or https URL")
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
		storeTimeout: opts.StoreTimeout,
		log:          opts.Logger,
		m:            opts.Metrics,
		newToken:     opts.NewToken,
		v1Lookup:     opts.V1Lookup,
	}
	if p.timeout <= 0 {
		p.timeout = 60 * time.Second
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
	p.passthrough = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     p.transport,
		FlushInterval: -1, // streaming responses reach the client as they come
		BufferPool:    newBufferPool(),
		ErrorHandler:  p.passthroughError,
		ErrorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// NewTransport returns the upstream transport idemgate uses by default:
// HTTP/1.1 and HTTP/2 with keep-alive, no transparent decompression (bodies
// are stored and replayed as the upstream sent them) and a response header
// timeout of timeout.
func NewTransport(timeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	t.MaxIdleConnsPerHost = 256
	t.ResponseHeaderTimeout = timeout
	return t
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// rewrite is the single place that shapes an outbound request, for both the
// passthrough ReverseProxy and the enforced path: target URL, Host of the
// upstream, and X-Forwarded-* set by idemgate (client-sent ones are dropped
// before this runs, so they are never trusted).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.upstream)
	pr.SetXForwarded()
}

// exchange is the state of one request on its way through ServeHTTP.
type exchange struct {
	start   time.Time
	route   *policy.Route
	id      store.Identity
	fp      string
	recipe  string // how fp was computed: the route's recipe, or the record's
	body    []byte
	read    bool // body holds the request body (readBody)
	outcome string
	status  int
}

// ServeHTTP enforces the route's policy on r; see README.md for the flow.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pol := p.policy()
	d := pol.Decide(r)
	ex := &exchange{start: time.Now(), route: d.Route}
	if d.NeedBody {
		// A form or JSON body may carry a _method override that changes
		// the decision: read it once, within the route's limit; the same
		// bytes go upstream.
		if !p.readBody(w, r, ex) {
			return
		}
		d = pol.DecideBody(r, ex.body)
		ex.route = d.Route
	}
	route := ex.route
	if d.Refuse != "" {
		p.fail(w, r, ex, metrics.OutcomeBadRequest, probAmbiguous.with(d.Refuse))
		return
	}
	if !route.Enforces(r.Method) || isUpgrade(r) {
		p.passthroughServe(w, r, ex)
		return
	}
	// What the upstream never gets must not decide the owner or the
	// fingerprint: "Connection: Content-Type" would otherwise make two
	// requests the upstream tells apart share one fingerprint.
	removeHopByHop(r.Header)
	key, err := policy.ParseKey(r.Header.Values(route.Header))
	switch {
	case errors.Is(err, policy.ErrKeyMissing):
		if !route.Required {
			p.passthroughServe(w, r, ex)
			return
		}
		p.fail(w, r, ex, metrics.OutcomeMissingKey, probMissingKey.with(
			fmt.Sprintf("route %q requires the %s field on %s requests", route.Name, route.Header, r.Method)))
		return
	case err != nil:
		p.fail(w, r, ex, metrics.OutcomeInvalidKey, probInvalidKey.with(err.Error()))
		return
	}
	owner, err := route.OwnerOf(r)
	if errors.Is(err, policy.ErrInvalidCredentials) {
		// owner: jwt. Never anonymous: a 401, and nothing goes upstream.
		challenge := `Bearer error="invalid_token"`
		if r.Header.Get("Authorization") == "" {
			challenge = "Bearer" // RFC 6750 section 3.1: no error code without credentials
		}
		w.Header().Set("WWW-Authenticate", challenge)
		p.fail(w, r, ex, metrics.OutcomeInvalidCredentials, probInvalidCreds.with(
			"the request carries an idempotency key, whose owner is the subject of a verified bearer token, and the token was not accepted: "+err.Error()))
		return
	}
	if err != nil {
		p.fail(w, r, ex, metrics.OutcomeMissingOwner, probMissingOwner.with(
			"the request carries an idempotency key but no owner ("+string(route.Owner.Kind)+"); keys are scoped per owner"))
		return
	}
	ex.id = store.Identity{Owner: owner, Scope: route.Scope, Key: key}
	if !p.readBody(w, r, ex) {
		return
	}
	ex.fp, ex.recipe = route.FingerprintOf(r, ex.body), route.Recipe()
	p.enforce(w, r, ex)
}

// enforce claims the identity and acts on the answer: forward, replay,
// reject or wait, until the request is answered.
func (p *Proxy) enforce(w http.ResponseWriter, r *http.Request, ex *exchange) {
	route := ex.route
	var waitUntil time.Time
	for {
		// A response this instance could not record yet is recorded first:
		// the claim below would otherwise find the record past its lease and
		// run the operation again.
		if err := p.recordPending(r.Context(), ex.id); err != nil {
			p.storeFailed(w, r, ex, "complete", err)
			return
		}
		token := p.newToken()
		held := route.OnAbandoned != policy.AbandonedReject && p.holdTakeover(route)
		ctx, cancel := p.storeCtx(r.Context())
		res, err := p.store.Claim(ctx, store.ClaimParams{
			Identity:    ex.id,
			Fingerprint: ex.fp,
			Recipe:      ex.recipe,
			Token:       token,
			Lease:       route.Lease,
			Retention:   route.Retention,
			NoTakeover:  route.OnAbandoned == policy.AbandonedReject || held,
		})
		cancel()
		if err != nil {
			if route.OnStoreError == policy.FailClosed {
				p.releaseLater(ex, token)
			}
			p.storeFailed(w, r, ex, "claim", err)
			return
		}
		p.noteStoreOK()
		if res.State != store.Claimed && res.Recipe != "" && res.Recipe != ex.recipe {
			// The record was fingerprinted under other settings (the route's
			// fingerprint changed, or another instance runs another config):
			// compare this request the way the record's first one was.
			spec, err := policy.ParseRecipe(res.Recipe)
			if err != nil {
				p.fail(w, r, ex, metrics.OutcomeMismatch, probMismatch.with(
					"this idempotency key was recorded by a version of idemgate whose fingerprint this one cannot compute, so it can be neither replayed nor run again"))
				return
			}
			ex.fp, ex.recipe = spec.Of(r, ex.body), res.Recipe
			if res.State == store.Abandoned && res.Fingerprint == ex.fp {
				// The store refused the takeover only for the other recipe.
				continue
			}
		}
		if res.State != store.Claimed && res.Fingerprint != ex.fp {
			p.fail(w, r, ex, metrics.OutcomeMismatch, probMismatch.with(
				"this idempotency key was already used for a request with a different method, path, query, headers or body"))
			return
		}
		switch res.State {
		case store.Claimed:
			if res.Takeover {
				p.m.Takeover(route.Name)
				p.log.Warn("took over an abandoned claim", "route", route.Name, "key_hash", keyHash(ex.id.Key))
			} else if p.v1Lookup && route.Name != ex.id.Scope {
				switch p.checkV1(w, r, ex, token, &waitUntil) {
				case v1Answered:
					return
				case v1Retry:
					continue
				}
			}
			if p.draining.Load() {
				// A call started now (a waiter whose first attempt released
				// the key, a request accepted just before SIGTERM) could
				// outlive the drain budget and be cut mid-way, its outcome
				// unknown; refused, it is retried on another instance.
				p.release(r, ex, token)
				pr := probShuttingDown.with("this instance is shutting down and starts no new upstream calls; retry with the same key")
				pr.RetryAfter = 1
				p.fail(w, r, ex, metrics.OutcomeShuttingDown, pr)
				return
			}
			p.forward(w, r, ex, token)
			return
		case store.Completed:
			p.replay(w, r, ex, res.Response)
			return
		case store.Abandoned:
			if held {
				// The store was failing until less than a lease ago: the
				// holder may be alive and about to record its response.
				p.conflict(w, r, ex, retryAfter(route.Lease))
				return
			}
			p.fail(w, r, ex, metrics.OutcomeAbandoned, probOutcomeUnknown.with(
				"the request that claimed this key stopped before it finished and the route does not retry it (on_abandoned: reject); an operator must purge the key"))
			return
		case store.Running:
			retry := retryAfter(time.Until(res.LeaseEnd))
			if route.Concurrent == policy.ConcurrentConflict {
				p.conflict(w, r, ex, retry)
				return
			}
			if !p.wait(w, r, ex, ex.id, retry, &waitUntil) {
				return
			}
		default:
			p.storeFailed(w, r, ex, "claim", fmt.Errorf("%w: unexpected claim state %v", store.ErrUnavailable, res.State))
			return
		}
	}
}

// releaseLater frees, in the background, a claim whose Claim call failed:
// the script may still have run (the reply was lost, or a stalled store
// applied it after the timeout), and nobody would hold that claim, so the
// client's retry, told to come back in a second, would find it running and
// wait out a whole lease. Release acts only while the record holds token,
// so it never frees another request's claim. It tries with backoff until
// the lease of that claim would have ended anyway.
func (p *Proxy) releaseLater(ex *exchange, token string) {
	id, lease := ex.id, ex.route.Lease
	go func() {
		deadline := time.Now().Add(lease)
		backoff := 100 * time.Millisecond
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), p.storeTimeout)
			released, err := p.store.Release(ctx, id, token)
			cancel()
			if err == nil {
				if released {
					p.log.Info("released a claim whose reply was lost", "scope", id.Scope, "key_hash", keyHash(id.Key))
				}
				return
			}
			time.Sleep(min(backoff, time.Until(deadline)))
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
}

// Drain makes the proxy start no new enforced upstream calls: a request
// that claims its key from now on releases it and gets 503 shutting-down
// (Retry-After: 1), while calls already running finish and record their
// outcome. Replays, waits and passthrough traffic are served as before.
// Call it when the process starts to shut down, before
// http.Server.Shutdown; it cannot be undone.
func (p *Proxy) Drain() { p.draining.Store(true) }

// wait waits while the record id (the request's own, or a layout 1
// record) is running, up to the route's wait_timeout counted from the first
// wait of this request (*until). It reports whether the caller should claim
// again; when it returns false the request has been answered (409 after the
// timeout, 503 when the store failed, nothing when the client left).
func (p *Proxy) wait(w http.ResponseWriter, r *http.Request, ex *exchange, id store.Identity, retry int, until *time.Time) bool {
	if until.IsZero() {
		*until = time.Now().Add(ex.route.WaitTimeout)
	}
	if !time.Now().Before(*until) {
		p.conflict(w, r, ex, retry)
		return false
	}
	if err := p.waitWhileRunning(r.Context(), id, *until); err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			p.storeFailed(w, r, ex, "wait", err)
			return false
		}
		if r.Context().Err() != nil {
			ex.outcome, ex.status = metrics.OutcomeConflict, 499
			p.done(r, ex)
			return false
		}
		p.conflict(w, r, ex, retry)
		return false
	}
	return true
}

// waitWhileRunning returns once the identity's record is no longer running
// (completed, released, purged or expired), waking on the store's
// notification and at most every store.SafetyPoll. Waiters for one identity
// in this process share one wait. It returns context.DeadlineExceeded at
// until, the store's error, or ctx's error.
func (p *Proxy) waitWhileRunning(ctx context.Context, id store.Identity, until time.Time) error {
	p.m.Waiters(1)
	defer p.m.Waiters(-1)
	for {
		ch := p.waits.DoChan(waitKey(id), func() (any, error) {
			// Detached: one waiter leaving must not end the wait of the others.
			wctx, cancel := context.WithDeadline(context.Background(), until)
			defer cancel()
			return nil, p.pollUntilNotRunning(wctx, id)
		})
		select {
		case res := <-ch:
			if res.Err == nil {
				return nil
			}
			// The shared wait may have started with an earlier deadline than ours.
			if errors.Is(res.Err, context.DeadlineExceeded) && time.Now().Before(until) {
				continue
			}
			return res.Err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(until)):
			return context.DeadlineExceeded
		}
	}
}

func (p *Proxy) pollUntilNotRunning(ctx context.Context, id store.Identity) error {
	for {
		changed, stop := p.store.Watch(id)
		gctx, cancel := context.WithTimeout(ctx, p.storeTimeout)
		rec, err := p.store.Get(gctx, id)
		cancel()
		if err != nil {
			stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if rec == nil || rec.State != store.Running {
			stop()
			return nil
		}
		t := time.NewTimer(store.SafetyPoll)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func waitKey(id store.Identity) string {
	return strconv.Itoa(len(id.Owner)) + ":" + id.Owner + strconv.Itoa(len(id.Scope)) + ":" + id.Scope + id.Key
}

// storeCtx bounds one store call. It is detached from the client: a claim or
// a record written halfway because the client left would only cost a lease.
func (p *Proxy) storeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), p.storeTimeout)
}

// storeFailed answers a store failure: 503 (fail closed) or, on routes that
// chose fail_open, forwards the request unprotected.
func (p *Proxy) storeFailed(w http.ResponseWriter, r *http.Request, ex *exchange, op string, err error) {
	p.noteStoreError()
	p.log.Error("store operation failed", "op", op, "route", ex.route.Name, "err", err)
	if ex.route.OnStoreError == policy.FailOpen && op == "claim" {
		p.forwardUnprotected(w, r, ex)
		return
	}
	pr := probStoreUnavailable.with("the idempotency store cannot be reached, so the request was not forwarded; retry later with the same key")
	pr.RetryAfter = 1
	p.fail(w, r, ex, metrics.OutcomeStoreError, pr)
}

func (p *Proxy) conflict(w http.ResponseWriter, r *http.Request, ex *exchange, retry int) {
	pr := probInProgress.with("a request with this idempotency key is still being processed; retry after the indicated time")
	pr.RetryAfter = retry
	p.fail(w, r, ex, metrics.OutcomeConflict, pr)
}

// retryAfter rounds d up to whole seconds, at least 1 (RFC 9110 section 10.2.3).
func retryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}

// replay writes a completed record's response exactly as stored, plus the
// replay marker; the upstream is not touched.
func (p *Proxy) replay(w http.ResponseWriter, r *http.Request, ex *exchange, resp *store.Response) {
	if resp == nil {
		p.storeFailed(w, r, ex, "claim", fmt.Errorf("%w: completed record without a response", store.ErrUnavailable))
		return
	}
	if resp.Omitted {
		p.fail(w, r, ex, metrics.OutcomeAbandoned, probNotRetained.with(
			fmt.Sprintf("the original request was processed (status %d) but its response exceeded max_response_bytes and was not stored; it will not be forwarded again", resp.Status)))
		return
	}
	writeStored(w, r, resp, true)
	ex.outcome, ex.status = metrics.OutcomeReplayed, resp.Status
	p.done(r, ex)
}

// writeStored writes a stored response: its headers as stored, the replay
// marker when replayed, Content-Length from the body, and the body unless
// the request is HEAD. The original answer and every replay go through it,
// so they differ only by the marker.
func writeStored(w http.ResponseWriter, r *http.Request, resp *store.Response, replayed bool) {
	h := w.Header()
	for name, values := range resp.Header {
		// resp.Header is this request's own copy (filtered from the
		// upstream's, or handed out by the store), so no second copy.
		h[name] = values
	}
	if replayed {
		h.Set(ReplayedHeader, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// fail answers with a problem and logs the request.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, ex *exchange, outcome string, pr Problem) {
	problem.Write(w, pr)
	ex.outcome, ex.status = outcome, pr.Status
	p.done(r, ex)
}

// done records one finished request: the metric, the request span's route
// and outcome (a no-op without a recording span; see package tracing) and
// one log line. Neither the raw key nor the owner is logged or traced, only
// a short hash of the key in the log.
func (p *Proxy) done(r *http.Request, ex *exchange) {
	p.m.Request(ex.route.Name, ex.outcome)
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		// Guarded: building the attributes costs an allocation per request
		// even for the no-op span when tracing is off.
		span.SetAttributes(attribute.String("idemgate.route", ex.route.Name), attribute.String("idemgate.outcome", ex.outcome))
	}
	if ex.outcome == metrics.OutcomePassthrough {
		return
	}
	if !p.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	// Typed attributes: this line is written for every enforced request.
	attrs := [7]slog.Attr{slog.String("route", ex.route.Name), slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("outcome", ex.outcome), slog.Int("status", ex.status), slog.Int64("duration_ms", time.Since(ex.start).Milliseconds())}
	n := 6
	if ex.id.Key != "" {
		attrs[n] = slog.String("key_hash", keyHash(ex.id.Key))
		n++
	}
	p.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs[:n]...)
}

// keyHash is what logs show instead of an idempotency key: enough to
// correlate lines, never the key itself.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
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
