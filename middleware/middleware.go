// Package middleware is idemgate's engine inside a Go service: the same
// policy decision, owner, fingerprint, claim, wait, record and replay as
// the standalone proxy, on the same stores and with the same records, around
// any http.Handler instead of in front of an upstream.
//
//	cfg, err := config.Load("idemgate.yaml", os.Environ(), config.InProcess())
//	...
//	idem, err := middleware.New(ctx, middleware.Options{Config: cfg, Registerer: prometheus.DefaultRegisterer})
//	...
//	http.ListenAndServe(":8080", idem(mux))
//
// A record written here is one the proxy replays, and the other way round,
// when both read the same configuration (routes, scopes, owners) from the
// same store and the request is sent to the same host, with the proxy's
// upstream.pass_host on or the host named in the route's pattern (the
// host is in the key scope in process, below): a team can move from in-app
// to the edge without losing a key.
//
// What differs in process, and how (the engine's contract with the handler
// is the proxy's with an upstream):
//
//   - A claimed request runs the handler once, on the request's goroutine,
//     with a context detached from the client (a client that leaves does
//     not cancel it) and bounded by upstream.timeout; a heartbeat extends
//     the claim while it runs. A failure the handler answers after
//     upstream.timeout ended its context is an unknown outcome (504
//     upstream-timeout, claim kept until the lease ends), not a release. A
//     success it answers after that deadline (a handler that ignores its
//     context) is stored and replayed: the engine cannot stop the handler,
//     waits for it, and so knows its outcome, where the proxy stops reading
//     its upstream at the deadline and answers 504 without it; either way
//     nothing runs twice.
//   - The handler's response is captured and reaches the client when the
//     handler returns, since what is stored is decided from the whole
//     response (status, header, body, declared trailers; grpc-status for
//     gRPC calls). Flush does nothing on a keyed route; Hijack is not
//     supported there (http.ResponseController returns
//     http.ErrNotSupported, and what the handler then writes decides); a
//     body longer than max_response_bytes is delivered once and not
//     retained, as the proxy does with a response too large to store.
//     Streams without end and protocol switches belong on routes that do
//     not enforce: those requests reach the handler as they came, with the
//     client's own ResponseWriter.
//   - A status the route does not store (a 4xx, a 5xx) releases the key:
//     written before the handler acts, it is how a handler refuses a
//     request and lets a retry run. What a status cannot say, the
//     handler says with the request it was given: NothingDone (it did
//     nothing: released, whatever it writes), Unreachable (its backend
//     could not be reached: released, answered 502 upstream-unreachable
//     as by the proxy) and OutcomeUnknown (it may
//     have acted and does not know the result: nothing stored, the claim
//     kept until the lease ends, then on_abandoned decides; the client
//     gets 502 upstream-failed or 504 upstream-timeout, as from the proxy).
//     ReverseProxyErrorHandler makes httputil.ReverseProxy say them, and
//     ReverseProxyTransport keeps net/http from re-sending a bodiless
//     keyed request by itself.
//   - A handler that panics has its claim kept until the lease ends, as
//     the proxy keeps it for an upstream whose connection was cut after it
//     got the request (which is what net/http does to the client of a
//     handler that panics): a panic says nothing of what ran before it.
//     One that reported NothingDone before it panicked has it released.
//     The panic goes on up the stack either way.
//   - Two middlewares nested around one handler: the inner one finds the
//     request inside the outer one's call and passes it to the handler
//     untouched (no claim, no access line, no metrics), since the outer
//     claim already covers it; a call the outer one forwards unprotected
//     (fail_open, its store down) holds no claim, and the inner one
//     enforces it by its own route. The request is the outer one's when it has
//     the header the outer engine gave its handler (a router passes the
//     request on) or the same idempotency key field; a request the
//     handler makes of its own during the call (a batch's item, with its
//     own key) is enforced by the engine it reaches.
//   - The handler sees the client's Host and may serve each host as
//     another tenant (a ServeMux's host patterns), while the fingerprint
//     does not cover the host, so the request's host joins the key scope
//     of routes whose pattern names none (identity.Scoping), as the proxy's
//     does with upstream.pass_host: the same key on two hosts is two
//     operations, and no host is answered another host's record.
//   - A store that cannot be reached or opened when New runs (a Valkey
//     or PostgreSQL that is down, a bolt file another process holds
//     locked) does not stop the service, as it does not stop the proxy:
//     New returns after one attempt (2 s at most) and connects in the
//     background; until the store answers, keyed requests are refused 503
//     store-unavailable and never reach the handler, and requests the
//     engine does not enforce do.
//     Options.WaitStore (the proxy's --wait-store) waits for it instead
//     and fails New if it does not come.
//   - upstream.url, upstream.pass_host, listen, admin and server.tls are
//     not used; the configuration is read once (no reload: build a new
//     middleware). To replace a middleware while it serves, build both on
//     one SharedStore (OpenShared, Options.Shared): the new one finds the
//     old one's records and the claims of the calls it still runs, which a
//     store opened by each New would not share (memory) or could not open
//     twice (bolt).
package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/engine"
	"github.com/idemgate/idemgate/internal/awaitonce"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
)

// Options configure New.
type Options struct {
	// Config is idemgate's configuration: routes (policy), store, problems,
	// log (access lines), server.max_waiters and server.max_store_waiting,
	// upstream.timeout (the bound of one call of the handler). Load it with
	// config.Load or config.Parse and config.InProcess(), which does not
	// ask for an upstream.url; build it in Go with config.Default and
	// policy.New. Required.
	Config *config.Config
	// Logger receives the warnings (a store that fails, a lease lost),
	// and the access lines when AccessLog is set; nil discards them.
	Logger *slog.Logger
	// AccessLog writes the access line of every request the middleware
	// sees (docs/operations.md, "Access log": route, outcome, key_hash,
	// request_id) to Logger at info, as the standalone proxy does, when
	// Config's log.access is on as well (its default). Off by default: a
	// service logs its own requests, and a library given a logger for
	// its warnings that wrote a line for each request would double that
	// log and cost every request a JSON line (about 3 µs). Without it, a
	// problem's request_id is still the X-Request-Id the handler sees.
	AccessLog bool
	// Registerer receives idemgate's metrics (docs/operations.md, "Metrics"); nil keeps
	// them unexported. Two middlewares on one Registerer collide, even
	// after the first one's ctx ended (nothing unregisters them), and the
	// second New fails saying so: give each its own, a
	// prometheus.NewRegistry() (tests), or one registry wrapped with a
	// label per middleware (prometheus.WrapRegistererWith).
	Registerer prometheus.Registerer
	// Store, when set, is used instead of opening the store Config names;
	// New does not close it. Tests pass store/memory here.
	Store store.Store
	// Shared, when set, is used instead of opening the store Config names
	// (Config.Store is not read): the store outlives this middleware, and
	// the one built next on it (a host's new configuration) finds its
	// records and the claims of the calls it still runs (SharedStore). New
	// does not close it. Store and WaitStore must not be set with it.
	Shared *SharedStore
	// WaitStore is how long New waits for a Valkey or PostgreSQL store to
	// answer before it returns, the standalone proxy's --wait-store. 0
	// (the default) returns once a first attempt has ended (at once when
	// the store refuses connections, after 2 s at most when it does not
	// answer: a store that is there is connected when New returns) and
	// goes on connecting in the background: until the store answers,
	// keyed requests are refused 503 store-unavailable and the handler
	// does not run for them (fail closed), while requests the engine does
	// not enforce reach it. With WaitStore > 0, a store
	// still unreachable after it fails New with an error wrapping
	// store.ErrUnavailable, for a service that would rather not start
	// (its previous version keeps serving a rolling deploy) than start
	// refusing keyed requests.
	WaitStore time.Duration
	// Closed, when set, is closed once the middleware has closed after ctx
	// ended: every request running through it has ended and every
	// response they left to record (a store that refused their
	// completion) is recorded or given up (proxy.CompleteRetryWindow,
	// 10 minutes). http.Server's Shutdown waits for the requests, not for
	// those responses, so a service's main waits for Closed after Shutdown
	// returns, or its exit loses them and the retry to the next process
	// is refused outcome-unknown (README, "Inside your Go service"); give
	// it a bound of its own, as a deployment's grace period does. A New
	// that returns an error never closes it.
	Closed chan<- struct{}
	// TracerProvider, when set, makes a span of every store call
	// ("store.claim", "store.complete", ...; docs/operations.md, "Tracing") made for a
	// request whose context carries a span: the service's own server span
	// (otelhttp, or any instrumentation that puts one in the request's
	// context) is their parent, and the engine sets idemgate.route and
	// idemgate.outcome on it, as the standalone proxy does on its own.
	// Nil makes none.
	TracerProvider trace.TracerProvider
}

// New opens the store opts.Config names and returns the middleware: a
// function that wraps a handler in the engine. Every handler it wraps
// shares one engine: the store, the metrics, the JWT key sets, the waiter
// slots (server.max_waiters), store admission (server.max_store_waiting)
// and the responses still to record. Wrapping allocates one small value
// and nothing else, so a router may wrap on every request, as
// gorilla/mux's Use does. It panics on a nil handler. When ctx ends (a
// service's signal, which also begins its http.Server's Shutdown), the
// requests still running keep the store until they end, and so do the
// responses they left to record (a store that refused their completion),
// until recorded or given up; then the store is closed and JWKS refreshes
// stop (a store passed in Options.Store is left open).
//
// The engine is package engine's, as the standalone proxy's and the Caddy
// module's are (engine.New). A store that cannot be opened does not fail
// New, whatever its driver: as the standalone proxy, the middleware opens
// it in the background and refuses keyed requests 503 store-unavailable
// until it answers (a Valkey or PostgreSQL that is down, a bolt file
// another process holds locked; see Options.WaitStore to wait for it
// instead). New returns an error, and opens nothing, when Config is nil,
// its store section is invalid (the store part of config.Config.Validate),
// the metrics cannot be registered, a jwks_file cannot be read,
// Options.WaitStore passed without the store answering (wrapping
// store.ErrUnavailable), or a route of Config takes owners of one kind
// from another source, in one scope, than a middleware built on the same
// Options.Shared store before did (header:X-User then header:X-Partner:
// the store keeps the first one's records under values the second gives
// other principals; give the route a scope of its own).
func New(ctx context.Context, opts Options) (func(http.Handler) http.Handler, error) {
	cfg := opts.Config
	if cfg != nil && cfg.Log.Access && !opts.AccessLog {
		// The engine reads log.access from the configuration, which is the
		// caller's: a copy says the middleware's default instead.
		c := *cfg
		c.Log.Access = false
		cfg = &c
	}
	e, err := engine.New(ctx, engine.Options{
		Config: cfg, Logger: opts.Logger, Registerer: opts.Registerer, TracerProvider: opts.TracerProvider,
		Store: opts.Store, Shared: opts.Shared,
		WaitStore: opts.WaitStore, WaitName: "Options.WaitStore", FirstAttemptWait: firstAttemptWait,
	})
	if errors.Is(err, engine.ErrRegister) {
		// Prometheus's own words do not say what to do; the usual cause is
		// a second New on one Registerer (prometheus.DefaultRegisterer,
		// in tests), which stays registered after the first one's ctx ends.
		return nil, fmt.Errorf("middleware: %w (one Registerer takes the metrics of one middleware only, and keeps them after its ctx ends: give each middleware.New a Registerer of its own, e.g. prometheus.NewRegistry() in tests, or prometheus.WrapRegistererWith(prometheus.Labels{\"idemgate_handler\": \"<name>\"}, reg) to serve several from one registry)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	// One engine proxy for every handler the middleware wraps, each call
	// of it naming its handler (ServeNext): a router that wraps on every
	// request (gorilla/mux's Use) would otherwise leave a proxy behind
	// per request, each with waiter slots, store admission and pending
	// completions of its own, none of them bounding the others
	// (TestMiddlewareWrappedPerRequestSharesOneEngine).
	p, err := e.Proxy(engine.ProxyOptions{Next: http.NotFoundHandler()})
	if err != nil {
		_ = e.Close()
		return nil, fmt.Errorf("middleware: %w", err)
	}
	if opts.Shared != nil {
		// The store outlives this middleware and the one it replaces, and
		// keeps that one's records (TestSharedStoreRefusesAnotherOwnerSourceInAScope).
		if err := opts.Shared.AdmitOwners(cfg.Policy); err != nil {
			_ = e.Close()
			return nil, fmt.Errorf("middleware: %w", err)
		}
	}
	// A service's signal ends ctx as its http.Server's graceful Shutdown
	// begins (README, "Inside your Go service"): the calls Shutdown waits
	// for still need the store, for their heartbeat and their completion.
	// Closed at once, it left each one's claim running and its response
	// unrecorded, so the retry to the next process was refused
	// outcome-unknown, or on a takeover route ran the operation again
	// (TestGracefulShutdownRecordsTheCallInFlight). The engine closes
	// once they have ended and the responses they left to record are
	// recorded, or given up (proxy.CompleteRetryWindow).
	c := &awaitonce.Await{}
	context.AfterFunc(ctx, func() {
		c.End(func() {
			go func() {
				_ = p.Wait(context.Background())
				_ = e.Close()
				if opts.Closed != nil {
					close(opts.Closed)
				}
			}()
		})
	})
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("middleware: nil handler")
		}
		return wrapped{p: p, next: next, calls: c}
	}, nil
}

// wrapped is a handler wrapped in the middleware: the engine's one proxy
// with next as the handler of each request.
type wrapped struct {
	p     *proxy.Proxy
	next  http.Handler
	calls *awaitonce.Await // the requests running through the middleware
}

func (h wrapped) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Enter()
	defer h.calls.Leave()
	h.p.ServeNext(w, r, h.next)
}

// firstAttemptWait bounds how long New waits for the first attempt to open
// the store when it does not wait for the store (Options.WaitStore 0): a
// store that answers is open when New returns, so a service does not
// refuse its first keyed requests for want of a few milliseconds; one that
// refuses connections fails the attempt at once; one that does not answer
// at all leaves New after this (Valkey's dial timeout), the attempt going
// on in the background (engine.StoreOptions.FirstAttemptWait).
const firstAttemptWait = 2 * time.Second
