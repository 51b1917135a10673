// Package caddyidem is idemgate's engine as a Caddy v2 HTTP handler,
// http.handlers.idempotency, with the Caddyfile directive idempotency
// (ordered before reverse_proxy, after authentication and the handle,
// handle_path, route and invoke blocks; a Caddyfile that puts it at the
// top of a site whose blocks reach a backend is refused, unless it orders
// it before them). It enforces HTTP idempotency
// (draft-ietf-httpapi-idempotency-key-header) on the handlers after it in
// the route: the first request of a key reaches them once, its replayable
// response is stored and replayed to retries, a key reused on another
// request is 422, and keyed requests are refused (503 store-unavailable)
// when the store cannot be reached. It is package middleware of
// github.com/idemgate/idemgate around Caddy's next handler, so it reads
// idemgate's configuration file (routes, owners, store) and writes the
// records the standalone proxy and the Go middleware replay, and the other
// way round. The host a request was sent to is part of its key scope (as
// in package middleware), so two sites on one configuration and one store
// never answer each other's keys.
//
// Build Caddy with it:
//
//	xcaddy build --with github.com/idemgate/idemgate/caddy
//
// or, from a checkout of the repository, at its root (the replace of
// this module's go.mod does not count in xcaddy's build module):
//
//	xcaddy build --output bin/caddy --with github.com/idemgate/idemgate/caddy=./caddy --replace github.com/idemgate/idemgate=.
//
// Caddyfile:
//
//	example.com {
//		idempotency {
//			config /etc/idemgate/idemgate.yaml
//		}
//		reverse_proxy 127.0.0.1:3000
//	}
//
// The store outlives a configuration: Caddy's reload provisions the new
// one, which takes the running one's store from a pool of the process when
// the store settings are the same (stores, storeKey), so records, a bolt
// file's lock and the claims of calls in flight across the reload stay
// where the new configuration finds them.
//
// The engine's contract with the handlers after it is package middleware's
// (its package documentation): on a keyed request they run once, with a
// context detached from the client and bounded by upstream.timeout, and
// what they write is captured and decided on (stored and sent, or the key
// released and sent) when they return.
//
// Errors of the handlers after it: a Caddy handler may return an error
// having written nothing. On a request the engine enforces, nothing
// written would read as net/http's implicit 200 and be stored as a
// success, so the adapter decides. reverse_proxy returns such errors both
// before and after its upstream has the request (a dial failure; an
// upstream that died mid-call, 502; response_header_timeout, 504), and
// only the first is known not to have acted. So an error that wraps
// reverseproxy.DialError (the connection was never made), or
// reverse_proxy's "no upstreams available" (it tried none), releases the
// key when no upstream got a connection earlier in the call
// (reverse_proxy returns its last error only: neverSent), and the client
// gets 502 upstream-unreachable, as from the standalone proxy
// (middleware.Unreachable); a retry runs again. So does a 4xx error from
// a call in which reverse_proxy picked no upstream and no connection was
// made (refused: an error directive, file_server in a handle block below
// a top-level idempotency; middleware.NothingDone), answered with its
// status and an empty body, as Caddy does when no handle_errors route is
// set. Every other error leaves the outcome unknown
// (middleware.OutcomeUnknown), as the standalone proxy's for an upstream
// that failed after the request was sent: the claim is kept until its
// lease ends and on_abandoned decides then, and the client gets 502
// upstream-failed (504 upstream-timeout for a timeout). A handler that
// refuses a request with a 5xx before acting answers it (respond, a
// status written) instead of returning an error: a status that is not
// stored releases the key. The error is logged at error level, and Caddy's handle_errors
// routes do not see it (the response is already decided). A request the
// engine does not enforce (another method, no key on a route that does
// not require one) reaches the next handler with Caddy's own
// ResponseWriter, and its error goes back to Caddy as it was, to
// handle_errors and the access log.
//
// A handler after it that fails having written a status (a reverse_proxy
// whose upstream broke off in the middle of the body panics with
// http.ErrAbortHandler, as the standard library's proxy does; a handler
// that returns an error after writing is made to do the same here) has
// acted, or may have: the engine keeps the claim and records nothing, as
// the standalone proxy does for an upstream answer cut short (outcome
// unknown: a retry gets 409 until the lease ends, never a second run, and
// never the truncated body as a success), and the client's connection is
// cut. The error is logged at error level, with wrote=true.
package caddyidem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/engine"
	"github.com/idemgate/idemgate/internal/awaitonce"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/tracing"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterDirective("idempotency", parseDirective)
	// After authentication and the block directives (orderedBefore); a
	// top-level idempotency beside blocks that reach a backend is refused
	// (checkPlace).
	httpcaddyfile.RegisterDirectiveOrder("idempotency", httpcaddyfile.Before, orderedBefore)
}

// Handler is the http.handlers.idempotency module: idemgate's engine
// around the rest of the route. Its JSON form:
//
//	{"handler": "idempotency", "config": "/etc/idemgate/idemgate.yaml",
//	 "overrides": {"store.valkey.addrs": "10.0.0.5:6379"}, "name": "orders"}
type Handler struct {
	// Config is the path of idemgate's YAML configuration (README.md,
	// "Configuration reference"); "" means the built-in defaults (memory store, POST
	// and PATCH enforced, owner authorization), with a warning. The
	// IDEMGATE_* environment variables of Caddy's process override it as
	// they do for the proxy; upstream.url is not needed (the next handler
	// is the upstream), and listen, admin, server.tls are not used.
	Config string `json:"config,omitempty"`
	// Overrides set configuration keys over the file and the environment:
	// key path (e.g. "store.valkey.addrs", "store.valkey.key_prefix",
	// "store.driver", "upstream.timeout") to its value written as in an
	// environment variable (lists comma-separated). Only the keys the
	// environment may set are accepted (config.WithOverrides): the policy
	// (defaults, routes) comes from the file. store.valkey.addrs with no
	// driver named (here, in the environment or in the file) selects the
	// valkey store, and beside another driver is refused (addrsSelectValkey).
	Overrides map[string]string `json:"overrides,omitempty"`
	// Name labels this handler's metrics (idemgate_handler="<name>") on
	// Caddy's metrics registry. Needed only when one Caddy configuration
	// has several idempotency handlers: unlabelled, the second one's
	// metrics collide with the first's and it fails to provision.
	Name string `json:"name,omitempty"`

	eng      *engine.Engine
	engine   *proxy.Proxy // eng's proxy around callNext
	logger   *zap.Logger
	store    *pooledStore // in stores under storeKey once Provision got it
	storeKey storeKey
	released bool // Cleanup let go of store (Caddy calls it from one goroutine)

	// The requests this configuration still runs, and whether Cleanup ran:
	// once both are over, awaitPending waits for the responses they left
	// to be recorded (keepForPending).
	running *awaitonce.Await
	// drainBudget bounds how long Cleanup keeps an exiting Caddy for the
	// calls still running and their responses (server.shutdown_timeout:
	// upstream.timeout plus config.ShutdownMargin by default; 0, no
	// limit).
	drainBudget time.Duration
}

// CaddyModule returns the module's information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision loads the configuration, opens its store (or takes the one
// the running configuration opened with the same settings: stores) and
// builds the engine. The store outlives this configuration: a reload that
// keeps its settings keeps the store, its records and the claims of the
// calls in flight; one that changes them opens a new store, and the old
// one is closed once no configuration uses it, its last call has ended
// and the responses those calls left to record are recorded (Cleanup,
// keepForPending, pooledStore). The metrics go to Caddy's metrics
// registry of this configuration (served by Caddy's metrics handler and
// admin /metrics), labelled with Name when it is set. A handler without
// Config is warned about: the defaults and the memory store are seldom
// what its author meant. It fails when the configuration is invalid, so Caddy does not
// start (or keeps its previous configuration), and when store.valkey.addrs
// is overridden beside a driver that is not valkey (addrsSelectValkey). A
// Valkey or PostgreSQL store that cannot be reached does not fail it
// (middleware.New): Caddy starts or reloads, its keyed requests get 503
// store-unavailable and never reach the next handler until the store
// answers, and every other request is served, so a store outage during a
// deploy blocks no site.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.running = new(awaitonce.Await)
	environ := os.Environ()
	var from config.Origins
	load := func(overrides map[string]string) (*config.Config, error) {
		return loadConfig(h.Config, environ, overrides, config.WithOrigins(&from))
	}
	cfg, err := load(h.Overrides)
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	if selectValkey, err := addrsSelectValkey(cfg.Store.Driver, from, h.Overrides); err != nil {
		return fmt.Errorf("idempotency: %w", err)
	} else if selectValkey {
		h.logger.Info("store_addrs (store.valkey.addrs) without a store driver: using the valkey store",
			zap.Strings("addrs", strings.Split(h.Overrides[addrsKey], ",")))
		with := maps.Clone(h.Overrides)
		with["store.driver"] = config.DriverValkey
		if cfg, err = load(with); err != nil {
			return fmt.Errorf("idempotency: %w", err)
		}
	}
	if h.Config == "" {
		h.logger.Warn("idempotency: no config: built-in defaults in force (POST and PATCH enforced, owner from Authorization) on the "+cfg.Store.Driver+" store; set config <path> in the idempotency block to use idemgate's configuration file",
			zap.String("store", cfg.Store.Driver))
	}
	key, err := newStoreKey(h.Name, cfg.Store)
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	val, loaded, err := stores.LoadOrNew(key, func() (caddy.Destructor, error) {
		s, err := middleware.OpenShared(cfg, middleware.SharedOptions{Logger: ctx.Slogger()})
		if err != nil {
			return nil, err
		}
		return &pooledStore{SharedStore: s}, nil
	})
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	h.store, h.storeKey = val.(*pooledStore), key
	if loaded {
		h.logger.Debug("idempotency: store kept from the running configuration", zap.String("store", cfg.Store.Driver))
	}
	var reg prometheus.Registerer = ctx.GetMetricsRegistry()
	if h.Name != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"idemgate_handler": h.Name}, reg)
	}
	// The engine the standalone proxy and the Go middleware build, on the
	// store of the pool, around the rest of the route. Its store calls are
	// spans of the request's trace when Caddy's tracing directive made
	// one (with Caddy's provider, which no module is given).
	h.eng, err = engine.New(ctx, engine.Options{
		Config: cfg, Logger: ctx.Slogger(), Registerer: reg, Shared: h.store.SharedStore,
		TracerProvider: tracing.ContextProvider(),
	})
	if errors.Is(err, engine.ErrRegister) {
		return fmt.Errorf("idempotency: %w (%s)", err, nameHint)
	}
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	p, err := h.eng.Proxy(engine.ProxyOptions{Next: http.HandlerFunc(h.callNext)})
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	// Last, so that only a policy that serves is remembered.
	if err := admit(h.Name, cfg.Store, cfg.Policy); err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	h.engine = p
	h.drainBudget = cfg.Server.ShutdownTimeout
	return nil
}

// loadConfig loads the configuration at path, with overrides (the
// Caddyfile's options), for an engine in process, as both Provision and
// the Caddyfile's placement check (ownerFields) read it.
func loadConfig(path string, environ []string, overrides map[string]string, opts ...config.LoadOption) (*config.Config, error) {
	opts = append(opts, config.InProcess())
	if len(overrides) > 0 {
		opts = append(opts, config.WithOverrides(overrides))
	}
	cfg, err := config.Load(path, environ, opts...)
	if err != nil && path != "" && !filepath.IsAbs(path) && errors.Is(err, fs.ErrNotExist) {
		// Caddy reads every relative path in a Caddyfile from its own
		// working directory, which is seldom the Caddyfile's.
		if wd, werr := os.Getwd(); werr == nil {
			err = fmt.Errorf("%w (config %s is relative, so it is read from Caddy's working directory %s, not the Caddyfile's: give an absolute path)", err, path, wd)
		}
	}
	return cfg, err
}

// Cleanup implements caddy.CleanerUpper: this configuration no longer
// uses its store (it is unloaded, or failed to provision). The store is
// closed when no other configuration uses it, its last call has ended,
// and this configuration's responses still to record are (keepForPending).
func (h *Handler) Cleanup() error {
	if h.eng != nil {
		// Stops its JWKS refreshes and its share of the store's reports;
		// calls still running finish on the store (pooledStore).
		_ = h.eng.Close()
	}
	if h.store == nil || h.released {
		return nil
	}
	h.released = true
	recorded := h.keepForPending()
	if _, err := stores.Delete(h.storeKey); err != nil {
		return fmt.Errorf("idempotency: closing the store: %w", err)
	}
	if caddy.Exiting() && recorded != nil {
		h.drain(recorded)
	}
	return nil
}

// drain keeps an exiting Caddy until recorded is closed (this
// configuration's calls have ended and their responses are recorded) and
// no call runs on its store, those of the configurations a reload
// replaced included (pooledStore), or until drainBudget has passed. Caddy
// exits once its servers' grace_period ends, with the requests they still
// run cut off, and a call cut off after its upstream may have acted
// leaves its claim running: a retry is refused outcome-unknown for good
// (a reject route), or runs the operation again once the lease ends (a
// takeover route). The standalone proxy drains within
// server.shutdown_timeout, which it refuses shorter than upstream.timeout;
// the module cannot refuse a grace_period (the http app's, provisioned
// around it), so it drains within the same budget instead: Caddy's
// servers do not close the connections of those calls, and their clients
// get their answers (TestCaddyGracePeriodShorterThanTheCall,
// TestCaddyStopAfterReloadMidCall).
func (h *Handler) drain(recorded <-chan struct{}) {
	done := func() bool {
		select {
		case <-recorded:
			return h.store.idle()
		default:
			return false
		}
	}
	if done() {
		return
	}
	h.logger.Info("exiting: waiting for the keyed calls in flight to end and record their responses",
		zap.Duration("shutdown_timeout", h.drainBudget))
	var timeout <-chan time.Time
	if h.drainBudget > 0 {
		t := time.NewTimer(h.drainBudget)
		defer t.Stop()
		timeout = t.C
	}
	// Polled: the calls of earlier configurations end on the store's
	// count, which nothing signals, and a process that exits can afford it.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-tick.C:
		case <-timeout:
			h.logger.Error("exiting with keyed calls in flight or responses not recorded after server.shutdown_timeout: their claims stay until their lease ends, then on_abandoned decides",
				zap.Duration("shutdown_timeout", h.drainBudget))
			return
		}
	}
}

// keepForPending keeps the store open, as a call running on it does
// (pooledStore), until the responses this configuration's engine sent or
// withheld without recording them (the store refused the completion) are
// recorded, or given up (proxy.CompleteRetryWindow). Closed before, by a
// reload onto other store settings or a handler's removal, it drops them:
// their claims run out, and a retry is answered 409 outcome-unknown (a
// reject route), or takes the claim over and runs the operation again (a
// takeover route), where it would have been replayed the response.
//
// The channel it returns is closed once that is over (nil when Provision
// failed before the engine).
func (h *Handler) keepForPending() <-chan struct{} {
	st, p := h.store, h.engine
	if p == nil {
		return nil // Provision failed before the engine
	}
	recorded := make(chan struct{})
	st.enter()
	h.running.End(func() {
		go func() {
			defer close(recorded)
			defer st.leave()
			// Unbounded: each pending response ends by itself, recorded
			// or given up at the end of its retry window.
			_ = p.Wait(context.Background())
		}()
	})
	return recorded
}

// addrsKey is the key the store_addrs option sets.
const addrsKey = "store.valkey.addrs"

// addrsSelectValkey reports whether the store_addrs option (overrides
// setting store.valkey.addrs) selects the valkey driver: it does when no
// driver is named anywhere (not in overrides, the environment, nor the
// file: from, as config.Load found them), and it is an error when the
// driver that is named (driver) is another.
//
// The driver is the memory store unless something names one, and
// store.valkey.addrs is read by the valkey driver alone, so store_addrs
// without a driver would otherwise be ignored and each Caddy keep its own
// records in memory: duplicates sent to two instances, or across a
// restart, would run twice, with nothing but a warning at start to show
// for it. Valkey addresses say which store is meant; the driver is
// selected rather than the configuration refused because no other
// reading of them exists, and a wrong one cannot pass unseen (a Valkey
// that is not there refuses keyed requests: fail closed). A driver that
// is named and is not valkey is a contradiction only its author can
// settle, so it is refused, naming both.
func addrsSelectValkey(driver string, from config.Origins, overrides map[string]string) (bool, error) {
	addrs, ok := overrides[addrsKey]
	if !ok {
		return false, nil
	}
	origin := from.Of("store.driver")
	named := origin.String()
	switch origin.Source {
	case config.SourceDefault:
		return true, nil
	case config.SourceOverride:
		named = "the store option, or the store.driver override"
	}
	if driver != config.DriverValkey {
		return false, fmt.Errorf("store_addrs %s (%s) is read by the valkey store only, and the store driver is %q (%s): remove store_addrs, or make the driver valkey",
			addrs, addrsKey, driver, named)
	}
	return false, nil
}

// nameHint is what a metrics registration failure at Provision adds to
// its error. The registry is Caddy's, one per configuration, and the
// only collectors of idemgate's on it are the idempotency handlers': two
// unnamed (or alike named) handlers register the same metrics
// (prometheus.AlreadyRegisteredError), and a named one beside an unnamed
// one registers them with other label names, which Prometheus refuses
// with a plain error ("a previously registered descriptor with the same
// fully-qualified name..."). A name for each handler cures both.
const nameHint = "several idempotency handlers in one configuration: give each its own name"

// nextKey is the request context key of the call in progress.
type nextKey struct{}

// call is one request's way through the engine to Caddy's next handler.
type call struct {
	next caddyhttp.Handler
	err  error // next's error on a request the engine did not enforce
}

// ServeHTTP runs the request through the engine, whose handler is the rest
// of the route (callNext).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// Counted until the engine is done with the store: Caddy may clean
	// this configuration up while the call runs (pooledStore).
	st := h.store
	st.enter()
	defer st.leave()
	h.running.Enter()
	defer h.running.Leave()
	c := &call{next: next}
	ctx := context.WithValue(r.Context(), nextKey{}, c)
	if sent := sentURL(r); sent != nil {
		ctx = context.WithValue(ctx, fingerprint.SentURLKey{}, sent)
	}
	h.engine.ServeHTTP(w, r.WithContext(ctx))
	return c.err
}

// sentURL is the URL the client sent r with, when a directive before this
// handler rewrote r.URL (handle_path's prefix stripping, rewrite, uri),
// else nil: the fingerprint covers the path and query as sent
// (fingerprint.SentURLKey), or two handle_path blocks, /a/* and /b/*,
// whose handlers both see /orders, would answer /b/orders with the record
// of /a/orders (TestCaddyHandlePathBlocksNeverShareRecords). Caddy
// rewrites r.RequestURI with r.URL, so only its original request tells.
func sentURL(r *http.Request) *url.URL {
	orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if !ok || orig.URL == nil || r.URL == nil {
		return nil
	}
	if orig.URL.EscapedPath() == r.URL.EscapedPath() && orig.URL.RawQuery == r.URL.RawQuery {
		return nil
	}
	// A copy of its own: the engine takes a value that is an enclosing
	// idempotency handler's own (one pointer) for that handler's request,
	// not this one's (proxy's sentURL).
	u := *orig.URL
	return &u
}

// callNext is the handler the engine wraps: Caddy's next handler of the
// request's call. A request the engine does not enforce arrives with the
// client's writer (the one ServeHTTP passed, in the engine's wrapper), and
// next's error goes back to Caddy, to handle_errors. On a request it
// enforces the writer is the engine's capture (middleware.Captured), and an error
// with nothing written releases the key when it is a dial failure and
// leaves the outcome unknown otherwise (see the package documentation),
// so that nothing is stored as a success and nothing runs twice.
func (h *Handler) callNext(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(nextKey{}).(*call)
	if c == nil {
		// Only ServeHTTP calls the engine, and the context keeps its values
		// (the engine detaches from the client's cancellation only).
		http.Error(w, "idempotency: request without its Caddy handler chain", http.StatusInternalServerError)
		return
	}
	if !middleware.Captured(w) {
		c.err = c.next.ServeHTTP(w, r)
		if c.err != nil {
			// Caddy answers it: nothing written is not an implicit 200.
			proxy.HostAnswers(r)
		}
		return
	}
	rec := &wroteWriter{ResponseWriter: w}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sent := sendGuard{cancel: cancel, body: r.ContentLength != 0,
		answer: func() (bool, bool) { return lastAnswer(r) },
		forget: func() { forgetAnswer(r) }}
	r = r.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { sent.gotConn(info.Conn) },
		// A transport that does not report its connections (FastCGI's)
		// still dials through net.Dialer, which reports each connection
		// it makes (TestCaddyFastCGIDialFailureAfterAnUpstreamActedKeepsTheClaim).
		ConnectStart:         sent.connectStart,
		ConnectDone:          sent.connectDone,
		WroteHeaderField:     sent.wroteHeaderField,
		WroteRequest:         sent.wroteRequest,
		GotFirstResponseByte: sent.answered,
		Got1xxResponse:       sent.got1xx,
	}))
	if r.ContentLength == 0 {
		hideKeyFields(r.Header)
	}
	err := c.next.ServeHTTP(rec, r)
	if sent.cut() {
		// Whatever reverse_proxy made of its cancelled call (499, no
		// error), an upstream may have acted on the first send.
		middleware.OutcomeUnknown(r, errors.Join(errSecondSendCut, err))
		h.logger.Error("a second send of a keyed request to an upstream was cut: outcome unknown, the claim is kept", zap.Error(err))
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if err == nil {
		return
	}
	status := http.StatusInternalServerError
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode >= 400 {
		status = he.StatusCode
	}
	if rec.wrote {
		h.logger.Error("next handler failed on a keyed request after it began its answer: outcome unknown, the claim is kept",
			zap.Int("status", status), zap.Bool("wrote", true), zap.Error(err))
		// What the engine takes for a handler cut off after it acted.
		panic(http.ErrAbortHandler)
	}
	if neverSent(err) && !sent.connected() {
		// Answered 502 upstream-unreachable by the engine, as the
		// standalone proxy answers its own dial failure.
		middleware.Unreachable(r, err)
		h.logger.Error("next handler reached no upstream on a keyed request (dial failure, or none available): key released",
			zap.Int("status", status), zap.Bool("wrote", false), zap.Error(err))
		w.WriteHeader(status)
		return
	}
	if refused(r, err) && !sent.connected() {
		middleware.NothingDone(r)
		h.logger.Error("next handler refused a keyed request before it reached an upstream: key released",
			zap.Int("status", status), zap.Bool("wrote", false), zap.Error(err))
		w.WriteHeader(status)
		return
	}
	// reverse_proxy returns its other errors once the upstream may have
	// the request (it died mid-call, response_header_timeout): the
	// outcome is unknown, as the standalone proxy's for the same upstream
	// (TestCaddyUpstreamFailureAfterSendKeepsTheClaim).
	middleware.OutcomeUnknown(r, err)
	h.logger.Error("next handler failed on a keyed request: outcome unknown, the claim is kept",
		zap.Int("status", status), zap.Bool("wrote", false), zap.Error(err))
	w.WriteHeader(status)
}

// refused reports whether err is a handler's refusal of r that reached no
// upstream: a 4xx status (RFC 9110 section 15.5: the request was not
// acted on, the client erred), from a call in which reverse_proxy picked
// no upstream (it sets {http.reverse_proxy.upstream.address} before it
// sends, FastCGI ones included). An `error` directive's
// 403, file_server's 404 or 405, request_body's 413: a handler ordered
// after idempotency, as in a handle block below a top-level one, refused
// the request, and the key is released rather than its outcome left
// unknown (TestCaddyRefusalReleasesKey). A 5xx is not a refusal.
func refused(r *http.Request, err error) bool {
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) || he.StatusCode < 400 || he.StatusCode > 499 {
		return false
	}
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return false
	}
	_, proxied := repl.Get("http.reverse_proxy.upstream.address")
	return !proxied
}

// neverSent reports whether err, returned by reverse_proxy with nothing
// written, says that its last attempt sent no byte of the request to an
// upstream. It proves nothing of the call as a whole: reverse_proxy returns
// the last error only, after an upstream may have had the request (an
// upstream that answered, then a handle_response route whose own
// reverse_proxy could not dial; an upstream that failed mid-call, then a
// retry allowed by lb_retry_match on one that could not be dialed), so
// callNext releases the key only when, besides, no connection to any
// upstream was made during the call (neither its httptrace GotConn nor a
// successful ConnectDone ran: FastCGI's transport reports only the
// second;
// TestCaddyDialFailureAfterAnUpstreamActedKeepsTheClaim). A dial
// failure (reverseproxy.DialError; TestCaddyNextErrorReleasesKey), or no
// upstream available to try (all of them unhealthy or at their request
// limit; TestCaddyNoUpstreamReleasesKey), which reverse_proxy, too, takes
// for safe to retry. Caddy keeps the second one unexported, so it is
// known by its status and text; a Caddy that words it otherwise leaves it
// an unknown outcome, the safe side.
func neverSent(err error) bool {
	var dial reverseproxy.DialError
	if errors.As(err, &dial) {
		return true
	}
	var he caddyhttp.HandlerError
	return errors.As(err, &he) && he.StatusCode == http.StatusServiceUnavailable &&
		he.Err != nil && errors.Unwrap(he.Err) == nil && he.Err.Error() == "no upstreams available"
}

// wroteWriter tells whether the handler wrote a status or body.
type wroteWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *wroteWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *wroteWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the engine's writer (Flush).
func (w *wroteWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush on (the engine's is a no-op on keyed requests).
func (w *wroteWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
