// Package engine builds idemgate's engine from a configuration: the one
// constructor that the standalone proxy (cmd/idemgate), the Go middleware
// (package middleware) and the Caddy module call, so the three shapes run
// on the same parts wired the same way.
//
// New builds what every request of a configuration shares: the store,
// opened by a connector in the background whatever the driver (Store), and
// instrumented with metrics and, given a tracer provider, spans; the
// metrics with a series per route; the JWT key sets of owner: jwt routes,
// refreshed until Close. Engine.Proxy then builds the request path on them
// (proxy.Proxy), in front of an upstream or around a handler in process,
// with every setting the configuration gives it. What a process has beside
// (listeners, signals, policy reload, the admin listener, draining) stays
// with the caller: cmd/idemgate.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/buildversion"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/tracing"
)

// ErrRegister marks New's error when the metrics could not be registered
// on Options.Registerer (usually a second engine on one Registerer), so a
// caller can say how to give each its own.
var ErrRegister = errors.New("registering the metrics")

// Options configure New.
type Options struct {
	// Config is idemgate's configuration, with its compiled policy.
	// Required.
	Config *config.Config
	// Logger receives the access lines (log.access), the store's lines and
	// warnings; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics (docs/operations.md, "Metrics"); nil keeps them
	// unexported. One Registerer takes the metrics of one engine.
	Registerer prometheus.Registerer
	// Version labels idemgate_build_info; "" is what the build recorded
	// (buildversion.Resolve).
	Version string
	// TracerProvider, when set, makes a span of every store call made for
	// a request whose context carries a span (tracing.InstrumentStore),
	// and a client span of every upstream call of the standalone proxy
	// (tracing.Transport). Nil (or a no-op provider) makes none.
	TracerProvider trace.TracerProvider
	// Store, when set, is the store instead of the one Config names; it
	// is never closed here, and counts as up. Tests pass store/memory.
	Store store.Store
	// Shared, when set, is the store instead of the one Config names
	// (OpenStore), left open by Close. Store and WaitStore must not be set
	// with it.
	Shared *Store
	// WaitStore, WaitName and FirstAttemptWait are StoreOptions' for the
	// store New opens.
	WaitStore        time.Duration
	WaitName         string
	FirstAttemptWait time.Duration
}

// Engine is what every request of one configuration shares: the store,
// the metrics, the JWT key sets and the tracer, and the proxies built on
// them (Proxy). Create it with New; Close it when its last proxy is done.
type Engine struct {
	cfg   *config.Config
	log   *slog.Logger
	m     *metrics.Metrics
	keys  *identity.KeyRing
	tp    trace.TracerProvider
	st    store.Store // instrumented
	src   *Store      // nil for Options.Store
	own   bool        // Close closes src
	stop  context.CancelFunc
	ended chan struct{} // the key refresh has stopped

	mu      sync.Mutex
	proxies []*proxy.Proxy
	closed  sync.Once
}

// New builds the engine of o.Config. It opens the store the configuration
// names (OpenStore, with the wait of o), unless o gives one; registers the
// metrics, with a series per route; reads every jwks_file of the policy
// and starts refreshing the JWT key sets. ctx bounds New's own waits (for
// the store, for JWKS); the engine runs until Close.
//
// It fails, having opened nothing it keeps, when Config (or its policy) is
// missing, Shared is set with Store or WaitStore, the metrics cannot be
// registered (wrapping ErrRegister), a jwks_file cannot be read, or
// OpenStore fails.
func New(ctx context.Context, o Options) (*Engine, error) {
	cfg := o.Config
	if cfg == nil || cfg.Policy == nil {
		return nil, errors.New("Options.Config (with its compiled policy) is required")
	}
	if o.Shared != nil && (o.Store != nil || o.WaitStore != 0) {
		return nil, errors.New("Options.Shared is the store: Options.Store and Options.WaitStore must not be set with it")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := o.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	version := o.Version
	if version == "" {
		version = buildversion.Resolve("", debug.ReadBuildInfo)
	}
	m, err := metrics.New(reg, version)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegister, err)
	}
	keys, err := NewKeyRing(log)
	if err != nil {
		return nil, err
	}
	if err := keys.Bind(ctx, cfg.Policy); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	e := &Engine{cfg: cfg, log: log, m: m, keys: keys, tp: o.TracerProvider, src: o.Shared, ended: make(chan struct{})}
	var st store.Store
	switch {
	case o.Shared != nil:
	case o.Store != nil:
		st = o.Store
		m.StoreUp(true)
	default:
		e.src, err = OpenStore(ctx, cfg, StoreOptions{Logger: log, WaitStore: o.WaitStore, WaitName: o.WaitName, FirstAttemptWait: o.FirstAttemptWait})
		if err != nil {
			return nil, err
		}
		e.own = true
	}
	if e.src != nil {
		st = e.src.st
		e.src.join(e)
	}
	st = metrics.InstrumentStore(st, m)
	e.st = tracing.InstrumentStore(st, o.TracerProvider)
	m.InitRoutes(routeNames(cfg.Policy)...)
	life, stop := context.WithCancel(context.Background())
	e.stop = stop
	go func() {
		defer close(e.ended)
		keys.Run(life)
	}()
	return e, nil
}

// Close stops refreshing the JWT key sets and leaves the store: it closes
// the store New opened (and returns once it is closed) and leaves open a
// store given in Options. Proxies built on the engine fail every keyed
// request once their store is closed. Later calls do nothing.
func (e *Engine) Close() error {
	var err error
	e.closed.Do(func() {
		e.stop()
		<-e.ended
		if e.src == nil {
			return
		}
		e.src.leave(e)
		if e.own {
			err = e.src.Close()
		}
	})
	return err
}

// ProxyOptions are what one proxy of an engine adds to it: where the
// requests it enforces go, and which policy decides them.
type ProxyOptions struct {
	// Next, when set, is the handler in process that takes the place of
	// the upstream (proxy.Options.Next): the middleware, the Caddy module.
	// Without it the proxy forwards to upstream.url (with
	// upstream.pass_host and server.h2c) through Transport.
	Next http.Handler
	// Transport sends the standalone proxy's upstream requests, in a
	// client span of Options.TracerProvider; nil is the proxy's own
	// (proxy.Options.Transport). Not used with Next.
	Transport http.RoundTripper
	// Policy returns the policy in force (a reloader's Current); nil is
	// the configuration's, for good.
	Policy func() *policy.Policy
	// PreviousPolicies returns the policies in force before the current
	// one (a reloader's Previous), proxy.Options.PreviousPolicies.
	PreviousPolicies func() []*policy.Policy
}

// Proxy builds a proxy on the engine, told of its store's disruptions
// (proxy.Proxy.NoteStoreFailure) from then on. Its settings are the
// configuration's: upstream.timeout, store.v1_lookup,
// server.trusted_proxies, log.access and log.query, problems,
// server.max_waiters and server.max_store_waiting. Its errors are
// proxy.New's (no upstream.url without Next).
func (e *Engine) Proxy(o ProxyOptions) (*proxy.Proxy, error) {
	cfg := e.cfg
	pol := o.Policy
	if pol == nil {
		p := cfg.Policy
		pol = func() *policy.Policy { return p }
	}
	opts := proxy.Options{
		Next:             o.Next,
		Timeout:          cfg.Upstream.Timeout,
		Store:            e.st,
		Policy:           pol,
		PreviousPolicies: o.PreviousPolicies,
		Logger:           e.log,
		Metrics:          e.m,
		V1Lookup:         cfg.Store.V1Lookup,
		TrustedProxies:   cfg.TrustedPrefixes(),
		NoAccessLog:      !cfg.Log.Access,
		NoLogQuery:       !cfg.Log.Query,
		Problems:         problem.Publisher{TypeBase: cfg.Problems.TypeBase, DocsURL: cfg.Problems.DocsURL},
		MaxWaiters:       cfg.Server.MaxWaiters,
		MaxStoreWaiting:  cfg.Server.MaxStoreWaiting,
	}
	if e.src != nil {
		// While the connector finds the store down, keyed requests are
		// refused at once instead of each waiting out the store timeout.
		opts.StoreDown = e.src.Down
	}
	if o.Next == nil {
		opts.Upstream, opts.PassHost, opts.H2C = cfg.Upstream.URL, cfg.Upstream.PassHost, cfg.Server.H2C
		if o.Transport != nil {
			opts.Transport = tracing.Transport(o.Transport, e.tp, tracing.Propagator())
		}
	}
	p, err := proxy.New(opts)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.proxies = append(e.proxies, p)
	e.mu.Unlock()
	return p, nil
}

// noteStoreFailure tells every proxy of the engine that its store was
// disrupted; it must not block, and NoteStoreFailure does not.
func (e *Engine) noteStoreFailure() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.proxies {
		p.NoteStoreFailure()
	}
}

// Bind makes the engine ready for pol, a policy that is to replace the
// one in force (a reload): it reads the jwks_file of every owner: jwt
// route of pol, and gives its routes their metrics series. An error
// leaves the policy in force as it was served.
func (e *Engine) Bind(ctx context.Context, pol *policy.Policy) error {
	if err := e.keys.Bind(ctx, pol); err != nil {
		return err
	}
	e.m.InitRoutes(routeNames(pol)...)
	return nil
}

// Store is the store every proxy of the engine uses, instrumented (for
// the admin listener, which reads and purges records).
func (e *Engine) Store() store.Store { return e.st }

// Metrics are the engine's metrics (for the listener's error log, which
// counts failed TLS handshakes).
func (e *Engine) Metrics() *metrics.Metrics { return e.m }

// Keys are the JWT key sets of the policy's owner: jwt routes (for
// readiness: KeyRing.Unready).
func (e *Engine) Keys() *identity.KeyRing { return e.keys }

// StoreChecked applies a store check made elsewhere (/readyz) to the
// store's state (Store.Note); it does nothing for a store given in
// Options.Store, which has no connector.
func (e *Engine) StoreChecked(start time.Time, err error) {
	if e.src != nil {
		e.src.Note(start, err)
	}
}

// jwksClientTimeout bounds one JWKS fetch, response body included.
const jwksClientTimeout = 10 * time.Second

// NewKeyRing returns the KeyRing that keeps the JWK Sets of owner: jwt
// routes, with its own HTTP client (no shared default transport), the wall
// clock and log.
func NewKeyRing(log *slog.Logger) (*identity.KeyRing, error) {
	return identity.NewKeyRing(identity.JWKSOptions{
		Client: &http.Client{
			Timeout:   jwksClientTimeout,
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
		},
		Now:    time.Now,
		Logger: log,
	})
}

// routeNames are the names of pol's routes, the defaults route included.
func routeNames(pol *policy.Policy) []string {
	routes := pol.Routes()
	names := make([]string, len(routes))
	for i, r := range routes {
		names[i] = r.Name
	}
	return names
}
