package metrics

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/store"
)

// Outcome labels of idemgate_requests_total, one per way a request ends.
const (
	OutcomeForwarded     = "forwarded"      // claimed and sent upstream once
	OutcomeReplayed      = "replayed"       // answered from a completed record
	OutcomeConflict      = "conflict"       // 409: still running (conflict mode or wait timed out)
	OutcomeMismatch      = "mismatch"       // 422: key reused with another fingerprint
	OutcomeInvalidKey    = "invalid_key"    // 400: malformed idempotency key
	OutcomeMissingKey    = "missing_key"    // 400: key required but absent
	OutcomeMissingOwner  = "missing_owner"  // 400: key present, owner absent
	OutcomeTooLarge      = "too_large"      // 413: request body over max_request_bytes
	OutcomeStoreError    = "store_error"    // 503: store unreachable, fail closed
	OutcomePassthrough   = "passthrough"    // not enforced, proxied untouched
	OutcomeFailOpen      = "fail_open"      // store unreachable, forwarded unprotected by route choice
	OutcomeUpstreamError = "upstream_error" // 502/504 from idemgate for a failed upstream exchange
	OutcomeAbandoned     = "abandoned"      // terminal: outcome unknown or response not retained
	OutcomeBadRequest    = "bad_request"    // 400: the request body could not be read
)

// OutcomeInvalidCredentials is the outcome label of a 401: the route takes
// its owner from a verified JWT (owner: jwt) and the request's bearer token
// is missing or not accepted; nothing was forwarded.
const OutcomeInvalidCredentials = "invalid_credentials"

// OutcomeShuttingDown is the outcome label of a 503 answered while the
// process drains: the request would have been forwarded, but a call
// started now could outlive the drain and be cut mid-way, leaving its
// outcome unknown; its claim was released and the client retries elsewhere.
const OutcomeShuttingDown = "shutting_down"

// Reasons of idemgate_tls_handshake_errors_total: what made a TLS
// handshake on the proxy listener fail, whichever side noticed (a client
// that rejects idemgate's certificate sends an alert that names the same
// reasons). The set is closed so that every series exists from the start.
const (
	TLSBadCertificate  = "bad_certificate"  // a certificate that does not parse or verify for another reason (usage, name), or the peer's bad_certificate alert
	TLSUnknownCA       = "unknown_ca"       // signed by a CA the verifier does not trust (server.tls.client_ca_file, or the client's roots)
	TLSExpired         = "expired"          // outside its validity period
	TLSNoCertificate   = "no_certificate"   // client_auth require and the client sent none
	TLSProtocolVersion = "protocol_version" // no TLS version in common (server.tls.min_version), SSLv2 or a version fallback
	TLSNotTLS          = "not_tls"          // the client spoke something else: plain HTTP on the TLS port, a scanner
	TLSClosed          = "closed"           // the client closed or reset the connection during the handshake (TCP health checks)
	TLSTimeout         = "timeout"          // the handshake did not finish within the server's read timeout
	TLSOther           = "other"            // anything else (no cipher suite in common, an internal error)
)

// TLSHandshakeReasons lists every reason, in the order docs/operations.md gives them.
var TLSHandshakeReasons = []string{TLSBadCertificate, TLSUnknownCA, TLSExpired, TLSNoCertificate,
	TLSProtocolVersion, TLSNotTLS, TLSClosed, TLSTimeout, TLSOther}

// OutcomeOverloaded is the outcome label of a 503 overloaded: the
// instance already had server.max_store_waiting keyed requests waiting for
// a store answer, so the request was refused at once, before anything was
// claimed or forwarded (idemgate_store_admission_rejected_total counts the
// same refusals per instance).
const OutcomeOverloaded = "overloaded"

// Metrics holds every idemgate collector. A nil *Metrics is valid and
// records nothing, so tests and library users need not build one.
type Metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	// routes holds the per-route children of requests, requestDuration,
	// upstream and storedBytes, each resolved once (routeMetrics): copy
	// on write, read with no lock.
	routes   atomic.Pointer[map[string]*routeMetrics]
	routesMu sync.Mutex
	// ops holds storeOps' children by operation and result, resolved at
	// their first use.
	ops               [store.OpCachedReplay + 1][2]lazy[prometheus.Observer]
	replayCacheHit    prometheus.Counter
	replayCacheMiss   prometheus.Counter
	upstream          *prometheus.HistogramVec
	storeOps          *prometheus.HistogramVec
	claimsInFlight    prometheus.Gauge
	waiters           prometheus.Gauge
	takeovers         *prometheus.CounterVec
	damaged           *prometheus.CounterVec
	heartbeatFailures *prometheus.CounterVec
	storedBytes       *prometheus.HistogramVec
	ackDuration       *prometheus.HistogramVec
	notAcknowledged   *prometheus.CounterVec
	storeUp           prometheus.Gauge
	replayCache       *prometheus.CounterVec
	tlsHandshake      *prometheus.CounterVec
	storeWaiting      prometheus.Gauge
	admissionRejected prometheus.Counter
}

// New creates the collectors and registers them, with idemgate_build_info
// carrying version, on reg. It returns an error when a collector is already
// registered on reg.
func New(reg prometheus.Registerer, version string) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_requests_total",
			Help: "Requests handled, by route and outcome.",
		}, []string{"route", "outcome"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_request_duration_seconds",
			Help:    "Duration of every request in seconds, from its header read to its last byte written, by route, method (" + methodLabels + ") and status class of the answer (1xx to 5xx).",
			Buckets: durationBuckets,
		}, []string{"route", "method", "code_class"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_upstream_duration_seconds",
			Help:    "Duration of enforced upstream exchanges in seconds, until the response body was read.",
			Buckets: durationBuckets,
		}, []string{"route"}),
		storeOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_store_operation_duration_seconds",
			Help:    "Duration of store operations in seconds, by operation and result (ok or error).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"operation", "result"}),
		claimsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_claims_in_flight",
			Help: "Claims this instance holds while their upstream call runs.",
		}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_waiters",
			Help: "Requests waiting for a running record of the same identity.",
		}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_lease_takeovers_total",
			Help: "Claims that took over a running record whose lease had ended.",
		}, []string{"route"}),
		heartbeatFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_heartbeat_failures_total",
			Help: "Lease extensions that failed or found the claim lost.",
		}, []string{"route"}),
		damaged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_stored_responses_damaged_total",
			Help: "Stored responses that failed their integrity check (length or CRC-32C) and were not replayed, by route.",
		}, []string{"route"}),
		storedBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_stored_response_size_bytes",
			Help:    "Size in bytes of response bodies stored for replay.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 10),
		}, []string{"route"}),
		ackDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_store_ack_duration_seconds",
			Help:    "Round trip in seconds of store writes that waited for replica acknowledgements (the script and its WAIT together), by operation.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 1.5, 2},
		}, []string{"operation"}),
		notAcknowledged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_store_writes_not_acknowledged_total",
			Help: "Store writes that the required replicas did not acknowledge in time, by operation.",
		}, []string{"operation"}),
		storeUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_store_up",
			Help: "1 while the store is connected and answers, 0 while it is not (yet).",
		}),
		replayCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_replay_cache_total",
			Help: "Lookups of the replay cache (store.valkey.cache_bytes) for records this instance has seen completed, by result: hit (answered with no round trip) or miss (read from the store).",
		}, []string{"result"}),
		storeWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_store_waiting",
			Help: "Keyed requests waiting for the answer to their claim (or a read before it) from the store; at most server.max_store_waiting are admitted.",
		}),
		admissionRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_store_admission_rejected_total",
			Help: "Keyed requests refused at once with 503 overloaded because server.max_store_waiting requests already waited for the store; nothing was claimed or forwarded.",
		}),
		tlsHandshake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_tls_handshake_errors_total",
			Help: "TLS handshakes on the proxy listener that failed, by reason (bad_certificate, unknown_ca, expired, no_certificate, protocol_version, not_tls, closed, timeout, other).",
		}, []string{"reason"}),
	}
	// Every series of a closed label set exists from the start, so a rate
	// or an increase over it counts the first event too.
	for _, r := range TLSHandshakeReasons {
		m.tlsHandshake.WithLabelValues(r)
	}
	for _, op := range AckedOperations {
		m.notAcknowledged.WithLabelValues(op)
	}
	m.replayCacheHit = m.replayCache.WithLabelValues(store.CacheHit.String())
	m.replayCacheMiss = m.replayCache.WithLabelValues(store.CacheMiss.String())
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idemgate_build_info",
		Help: "Build information; always 1.",
	}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	for _, c := range []prometheus.Collector{m.requests, m.requestDuration, m.upstream, m.storeOps, m.claimsInFlight,
		m.waiters, m.takeovers, m.damaged, m.heartbeatFailures, m.storedBytes, m.ackDuration, m.notAcknowledged, m.storeUp, m.replayCache, m.tlsHandshake,
		m.storeWaiting, m.admissionRejected, info} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// AckedOperations are the store writes that wait for replica
// acknowledgements (store.valkey.acks), the operation label of
// idemgate_store_ack_duration_seconds and
// idemgate_store_writes_not_acknowledged_total.
var AckedOperations = []string{"claim", "extend", "complete"}

// InitRoutes creates the per-route event counters
// (idemgate_lease_takeovers_total, idemgate_heartbeat_failures_total,
// idemgate_stored_responses_damaged_total) at 0
// for each of routes, so that an increase over them counts a route's first
// takeover too. Call it with the routes of every policy put in service;
// series of routes a reload removed stay. idemgate_requests_total is left
// to appear with each route's traffic: its outcomes times every route
// would be many series that stay 0.
func (m *Metrics) InitRoutes(routes ...string) {
	if m == nil {
		return
	}
	for _, r := range routes {
		m.takeovers.WithLabelValues(r)
		m.heartbeatFailures.WithLabelValues(r)
		m.damaged.WithLabelValues(r)
	}
}

// Request counts one finished request of route with outcome (an Outcome* constant).
func (m *Metrics) Request(route, outcome string) {
	if m == nil {
		return
	}
	i := outcomeIndex(outcome)
	if i < 0 {
		m.requests.WithLabelValues(route, outcome).Inc()
		return
	}
	m.route(route).requests[i].get(func() prometheus.Counter {
		return m.requests.WithLabelValues(route, outcome)
	}).Inc()
}

// outcomes are the outcome labels of idemgate_requests_total whose
// children routeMetrics keeps; any other (none today) is looked up by
// label on every request.
var outcomes = [...]string{OutcomeForwarded, OutcomeReplayed, OutcomeConflict, OutcomeMismatch,
	OutcomeInvalidKey, OutcomeMissingKey, OutcomeMissingOwner, OutcomeTooLarge, OutcomeStoreError,
	OutcomePassthrough, OutcomeFailOpen, OutcomeUpstreamError, OutcomeAbandoned, OutcomeBadRequest,
	OutcomeInvalidCredentials, OutcomeShuttingDown, OutcomeOverloaded}

// outcomeIndex returns outcome's index in outcomes, -1 when absent.
func outcomeIndex(outcome string) int {
	for i, o := range outcomes {
		if o == outcome {
			return i
		}
	}
	return -1
}

// lazy is one child of a metric vector, resolved by label at its first
// use: the requests after it cost the metric's own atomic adds, without
// hashing the labels or taking the vector's lock (WithLabelValues, about
// 0.2 µs and a lock shared by every request, several times per request).
type lazy[T any] struct{ p atomic.Pointer[T] }

// get returns the child, resolving it with resolve the first time.
func (l *lazy[T]) get(resolve func() T) T {
	if p := l.p.Load(); p != nil {
		return *p
	}
	v := resolve()
	l.p.CompareAndSwap(nil, &v)
	return *l.p.Load()
}

// durationBuckets are the upper bounds, in seconds, of the request and
// upstream duration histograms: from a replay answered from memory (about a
// millisecond) to the longest upstream.timeout worth waiting for.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// methods are the method label values of idemgate_request_duration_seconds
// other than methodOther: the methods of RFC 9110 section 9 and PATCH (RFC
// 5789). Any other method (WebDAV's, a client's invention) is methodOther,
// so a client cannot mint series.
var methods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace}

// methodOther is the method label of every method not in methods.
const methodOther = "OTHER"

// methodLabels lists the method label values, for the help text.
const methodLabels = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, CONNECT, TRACE or OTHER"

// codeClasses are the code_class label values, by status/100 - 1.
var codeClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// routeMetrics are one route's children of the per-request metrics:
// idemgate_request_duration_seconds' one per method and status class,
// idemgate_requests_total's one per outcome, and the upstream duration
// and stored size, each resolved at its first request: a request then
// costs the metrics' own atomic adds and no label hashing or allocation.
type routeMetrics struct {
	cells       [len(methods) + 1][len(codeClasses)]lazy[prometheus.Observer]
	requests    [len(outcomes)]lazy[prometheus.Counter]
	upstream    lazy[prometheus.Observer]
	storedBytes lazy[prometheus.Observer]
}

func methodIndex(method string) int {
	for i, m := range methods {
		if m == method {
			return i
		}
	}
	return len(methods)
}

// classIndex maps status to its class; anything outside 100 to 599 (a
// handler that wrote nothing gets net/http's implicit 200) is 2xx.
func classIndex(status int) int {
	if status < 100 || status > 599 {
		return 1
	}
	return status/100 - 1
}

// RequestDuration observes one finished request of route, whatever its
// outcome, with the request's method, the status the client was sent and
// how long it took (idemgate_request_duration_seconds), as the request
// duration histograms of nginx's and Traefik's exporters do.
func (m *Metrics) RequestDuration(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	mi, ci := methodIndex(method), classIndex(status)
	m.route(route).cells[mi][ci].get(func() prometheus.Observer {
		label := methodOther
		if mi < len(methods) {
			label = methods[mi]
		}
		return m.requestDuration.WithLabelValues(route, label, codeClasses[ci])
	}).Observe(d.Seconds())
}

// route returns route's children, adding an entry for a route seen for
// the first time (a reload may add routes; entries of removed routes
// stay, as their series do).
func (m *Metrics) route(route string) *routeMetrics {
	if all := m.routes.Load(); all != nil {
		if rd, ok := (*all)[route]; ok {
			return rd
		}
	}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	old := m.routes.Load()
	if old != nil {
		if rd, ok := (*old)[route]; ok {
			return rd
		}
	}
	next := make(map[string]*routeMetrics, 1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	rm := &routeMetrics{}
	next[route] = rm
	m.routes.Store(&next)
	return rm
}

// Upstream observes one enforced upstream exchange of route that took d.
func (m *Metrics) Upstream(route string, d time.Duration) {
	if m == nil {
		return
	}
	m.route(route).upstream.get(func() prometheus.Observer {
		return m.upstream.WithLabelValues(route)
	}).Observe(d.Seconds())
}

// ClaimsInFlight adds delta (+1 or -1) to the claims held by this instance.
func (m *Metrics) ClaimsInFlight(delta float64) {
	if m == nil {
		return
	}
	m.claimsInFlight.Add(delta)
}

// Waiters adds delta (+1 or -1) to the requests waiting on a running record.
func (m *Metrics) Waiters(delta float64) {
	if m == nil {
		return
	}
	m.waiters.Add(delta)
}

// StoreWaiting adds delta (+1 or -1) to the keyed requests waiting for a
// store answer (idemgate_store_waiting). No allocation: it is on the path
// of every keyed request.
func (m *Metrics) StoreWaiting(delta float64) {
	if m == nil {
		return
	}
	m.storeWaiting.Add(delta)
}

// StoreAdmissionRejected counts one keyed request refused because
// server.max_store_waiting requests already waited for the store.
func (m *Metrics) StoreAdmissionRejected() {
	if m == nil {
		return
	}
	m.admissionRejected.Inc()
}

// Takeover counts one lease takeover on route.
func (m *Metrics) Takeover(route string) {
	if m == nil {
		return
	}
	m.takeovers.WithLabelValues(route).Inc()
}

// StoredResponseDamaged counts one stored response of route that failed
// its integrity check (store.ErrStoredResponseDamaged) and was not
// replayed.
func (m *Metrics) StoredResponseDamaged(route string) {
	if m == nil {
		return
	}
	m.damaged.WithLabelValues(route).Inc()
}

// HeartbeatFailure counts one failed or lost lease extension on route.
func (m *Metrics) HeartbeatFailure(route string) {
	if m == nil {
		return
	}
	m.heartbeatFailures.WithLabelValues(route).Inc()
}

// StoredResponse observes the body size in bytes of a response stored on route.
func (m *Metrics) StoredResponse(route string, bytes int) {
	if m == nil {
		return
	}
	m.route(route).storedBytes.get(func() prometheus.Observer {
		return m.storedBytes.WithLabelValues(route)
	}).Observe(float64(bytes))
}

// StoreAck observes one store write of operation ("claim", "extend",
// "complete") that waited for replica acknowledgements: took is the round
// trip of the script and its WAIT, acknowledged whether they came in time
// (if not, idemgate_store_writes_not_acknowledged_total counts it).
func (m *Metrics) StoreAck(operation string, took time.Duration, acknowledged bool) {
	if m == nil {
		return
	}
	m.ackDuration.WithLabelValues(operation).Observe(took.Seconds())
	if !acknowledged {
		m.notAcknowledged.WithLabelValues(operation).Inc()
	}
}

// TLSHandshakeError counts one failed TLS handshake on the proxy listener;
// reason is one of TLSHandshakeReasons (anything else counts as TLSOther).
func (m *Metrics) TLSHandshakeError(reason string) {
	if m == nil {
		return
	}
	switch reason {
	case TLSBadCertificate, TLSUnknownCA, TLSExpired, TLSNoCertificate, TLSProtocolVersion, TLSNotTLS, TLSClosed, TLSTimeout:
	default:
		reason = TLSOther
	}
	m.tlsHandshake.WithLabelValues(reason).Inc()
}

// StoreUp sets idemgate_store_up: 1 when up, else 0.
func (m *Metrics) StoreUp(up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.storeUp.Set(v)
}

// InstrumentStore returns s with every operation timed into
// idemgate_store_operation_duration_seconds (store.Observe), and every
// replay-cache lookup that was made counted into
// idemgate_replay_cache_total (result hit or miss; a skipped one, for a
// key not seen completed, is not a lookup). With a nil m it returns s.
func InstrumentStore(s store.Store, m *Metrics) store.Store {
	if m == nil {
		return s
	}
	return store.Observe(s, storeObserver{m: m})
}

// storeObserver is the store.Observer of InstrumentStore.
type storeObserver struct{ m *Metrics }

// Start implements store.Observer: the wrapper times the call.
func (o storeObserver) Start(ctx context.Context, _ store.Call) (context.Context, any) {
	return ctx, nil
}

// End implements store.Observer.
func (o storeObserver) End(c store.Call, _ any, out store.Outcome) {
	if c.Op == store.OpCachedReplay {
		switch out.Cache {
		case store.CacheHit:
			o.m.replayCacheHit.Inc()
		case store.CacheMiss:
			o.m.replayCacheMiss.Inc()
		case store.CacheSkipped:
		default:
			o.m.replayCache.WithLabelValues(out.Cache.String()).Inc()
		}
		return
	}
	result, ri := "ok", 0
	if out.Err != nil {
		result, ri = "error", 1
	}
	obs := func() prometheus.Observer { return o.m.storeOps.WithLabelValues(c.Op.String(), result) }
	if int(c.Op) < len(o.m.ops) {
		o.m.ops[c.Op][ri].get(obs).Observe(out.Took.Seconds())
		return
	}
	obs().Observe(out.Took.Seconds())
}
