package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/engine"
	"github.com/idemgate/idemgate/internal/buildversion"
	"github.com/idemgate/idemgate/internal/exampleapi"
	"github.com/idemgate/idemgate/internal/fastslog"
	"github.com/idemgate/idemgate/internal/logbuf"
	"github.com/idemgate/idemgate/internal/serverlog"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/reload"
	"github.com/idemgate/idemgate/tracing"
)

// version is stamped at build time with -ldflags "-X main.version=..." (see
// docs/proxy.md, "Build and start"); it is only read, through
// buildversion.Resolve, which falls back to the build information.
var version = buildversion.Dev

const usage = `idemgate: an idempotency-enforcing reverse proxy

Usage:
  idemgate serve --config FILE        run the proxy (idemgate serve -h lists the flags that override the file)
  idemgate serve --upstream URL       run with built-in defaults and the memory store
  idemgate demo                       run an example API on 127.0.0.1:3000 behind idemgate on 127.0.0.1:8080
  idemgate validate --config FILE     check a config file and print every route's effective policy
  idemgate policy --config FILE [--format markdown|json|openapi]
                                      print what clients of the enforced routes must know, for API docs
  idemgate init --from-openapi SPEC  write a config from an OpenAPI description (idemgate init -h; --check --config FILE for drift)
  idemgate migrate --config FILE      create the Postgres store's table when missing (store.driver: postgres), nothing else
  idemgate healthcheck [--url URL]    exit 0 when the admin /healthz answers 200 (container health check)
  idemgate admin get|purge|routes     inspect or purge a record over the admin API (idemgate admin lists the flags)
  idemgate version                    print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr, false)
	case "demo":
		return serve(args[1:], stderr, true)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "migrate":
		return migrate(args[1:], stdout, stderr)
	case "policy":
		return policyCommand(args[1:], stdout, stderr)
	case "init":
		return initCommand(args[1:], os.Stdin, stdout, stderr)
	case "healthcheck":
		return healthcheck(args[1:], stderr)
	case "admin":
		return adminCmd(args[1:], os.Environ(), stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "idemgate %s %s\n", buildversion.Resolve(version, debug.ReadBuildInfo), runtime.Version())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "idemgate: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file to check")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "idemgate validate: --config FILE is required")
		return 2
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "idemgate validate: %s is invalid:\n", *path)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
		return 1
	}
	// Reads every jwks_file, as serve would; a jwks_url is not fetched.
	keys, err := engine.NewKeyRing(slog.New(slog.DiscardHandler))
	if err == nil {
		err = keys.Bind(context.Background(), cfg.Policy)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemgate validate: %s is invalid:\n", *path)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
		return 1
	}
	// A jwks_url is fetched once to warn about one that does not answer
	// (a placeholder copied from config.example.yaml, a typo, no network
	// path): serve would refuse every token of its routes and /readyz would
	// answer 503 until it does. A warning, not an error: the network where
	// validate runs (a CI job) may not be the one serve runs in.
	if err := keys.Check(context.Background(), cfg.Policy, jwksCheckTimeout); err != nil {
		fmt.Fprintf(stderr, "idemgate validate: WARNING: a jwks_url cannot be read from here; its routes will refuse every token and /readyz will answer 503 until it can:\n")
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
	}
	warnSharedHostScope(stderr, cfg)
	fmt.Fprintf(stdout, "%s is valid. Upstream %s, store %s.\n\n", *path, cfg.Upstream.URL, cfg.Store.Driver)
	if err := cfg.Policy.Describe(stdout); err != nil {
		fmt.Fprintf(stderr, "idemgate validate: %v\n", err)
		return 1
	}
	for _, r := range cfg.Policy.Routes() {
		if r.Owner.Kind == identity.OwnerAuthorization {
			fmt.Fprint(stdout, authorizationNote)
			break
		}
	}
	return 0
}

// authorizationNote is printed by validate under a policy in which some
// route uses owner: authorization.
const authorizationNote = `
Note: owner: authorization hashes the whole Authorization field, so every
new token is a new owner. A client that refreshes its access token and
retries with the same Idempotency-Key runs the operation again. Prefer
owner: jwt (the owner is the verified token's iss and sub, which a refresh
keeps), or owner: header:NAME with a header that a trusted authenticating
proxy in front of idemgate sets and clients cannot.
`

// parseExit is the exit code for a flag parsing error: 0 when help was
// asked for (-h), 2 for a usage error.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// serveFlags are the command-line overrides of serve and demo.
type serveFlags struct {
	config, upstream, listen, adminListen, storeDriver, valkeyAddrs, boltPath, postgresDSN, logFormat, logLevel string
	// h2c sets server.h2c: HTTP/2 without TLS on the plain listener.
	h2c bool
	// waitStore > 0 makes serve wait that long for the store before it
	// listens, and exit 1 when the store is still unreachable (the
	// behaviour before idemgate started without its store).
	waitStore time.Duration
}

func serve(args []string, stderr io.Writer, demo bool) int {
	name := "serve"
	if demo {
		name = "demo"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	fs.StringVar(&f.config, "config", "", "config file (YAML); without it the built-in defaults apply")
	fs.StringVar(&f.upstream, "upstream", "", "upstream URL (overrides upstream.url)")
	fs.StringVar(&f.listen, "listen", "", "proxy listen address (overrides listen)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin listen address (overrides admin.listen)")
	fs.StringVar(&f.storeDriver, "store", "", "store driver: memory | valkey | bolt | postgres (overrides store.driver)")
	fs.StringVar(&f.valkeyAddrs, "valkey-addrs", "", "comma-separated Valkey addresses (overrides store.valkey.addrs)")
	fs.StringVar(&f.boltPath, "bolt-path", "", "bolt database file; its directory must exist (overrides store.bolt.path)")
	fs.StringVar(&f.postgresDSN, "postgres-dsn", "", "Postgres connection URL or key=value string (overrides store.postgres.dsn; IDEMGATE_STORE_POSTGRES_DSN keeps a password off the command line)")
	fs.StringVar(&f.logFormat, "log-format", "", "text | json (overrides log.format)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug | info | warn | error (overrides log.level)")
	fs.BoolVar(&f.h2c, "h2c", false, "serve HTTP/2 without TLS (prior knowledge) on the plain listener beside HTTP/1.1 (sets server.h2c)")
	fs.DurationVar(&f.waitStore, "wait-store", 0, "wait up to this long for the store before listening and exit 1 if it is still unreachable; 0 (default) listens at once and connects in the background")
	// SIGHUP is how nginx and systemd ask for a reload. Its default action
	// ends the process at once, cutting calls in flight whose claims a
	// peer later takes over: a second execution. So it is caught in every
	// mode, from before anything is started; without a config file
	// runServer's reloader logs that there is nothing to reload
	// (TestSIGHUPNeverKills).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if demo {
		if f.upstream == "" {
			f.upstream = "http://127.0.0.1:3000"
		}
		if f.listen == "" {
			f.listen = "127.0.0.1:8080"
		}
	}
	load := configLoader(f, os.Environ())
	cfg, err := load(f.config)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate %s: invalid configuration:\n", name)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
		return 1
	}
	// The access lines are buffered as nginx buffers its access log, and
	// written by Close at exit (deferred first, so it runs last).
	logOut := logbuf.New(stderr, logbuf.DefaultSize, logbuf.DefaultInterval)
	defer logOut.Close()
	log := slog.New(logbuf.Handler(newLogger(cfg.Log, logOut).Handler(), logOut, isAccessLine))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var demoAPI *http.Server
	if demo {
		// Killed by its PID, `go run ./cmd/idemgate demo` leaves this
		// process behind holding the demo's ports; it stops with it.
		var stopWatch context.CancelFunc
		ctx, stopWatch = untilParentExits(ctx)
		defer stopWatch()
		demoAPI, err = startDemoAPI(cfg.Upstream.URL.Host, log)
		if err != nil {
			log.Error("cannot start the example API", "err", err)
			return 1
		}
		defer demoAPI.Close()
	}
	o := runOptions{configPath: f.config, load: load, log: log, waitStore: f.waitStore, hup: hup,
		version: buildversion.Resolve(version, debug.ReadBuildInfo)}
	if err := runServer(ctx, cfg, o); err != nil {
		log.Error("idemgate stopped", "err", err)
		return 1
	}
	return 0
}

// overrides returns the flags that were given, keyed by the config path
// they override (e.g. "upstream.url"), for config.WithOverrides.
func (f serveFlags) overrides() map[string]string {
	o := map[string]string{}
	for key, v := range map[string]string{
		"upstream.url":       f.upstream,
		"listen":             f.listen,
		"admin.listen":       f.adminListen,
		"store.driver":       f.storeDriver,
		"store.valkey.addrs": f.valkeyAddrs,
		"store.bolt.path":    f.boltPath,
		"store.postgres.dsn": f.postgresDSN,
		"log.format":         f.logFormat,
		"log.level":          f.logLevel,
	} {
		if v != "" {
			o[key] = v
		}
	}
	if f.h2c {
		o["server.h2c"] = "true"
	}
	return o
}

// configLoader returns the one loader of serve and demo: the file at path
// (or the built-in defaults for ""), then environ, then the flags, merged by
// config.Load and validated. The start and every policy reload call it, so a
// reload sees the environment and flags the process started with.
func configLoader(f serveFlags, environ []string) func(path string) (*config.Config, error) {
	environ = slices.Clone(environ)
	overrides := f.overrides()
	return func(path string) (*config.Config, error) {
		cfg, err := config.Load(path, environ, config.WithOverrides(overrides))
		if err != nil {
			return nil, err
		}
		// Load leaves a missing upstream.url to the caller when there is no
		// file; with the flags applied it is required.
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		return cfg, nil
	}
}

// isAccessLine reports whether r is the proxy's per-request access line,
// the one line that may wait in the log buffer (logbuf.Handler).
func isAccessLine(r slog.Record) bool {
	return r.Level == slog.LevelInfo && r.Message == proxy.AccessLogMessage
}

func newLogger(c config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	// slog's own format, written by hand for the access line
	// (internal/fastslog).
	return slog.New(fastslog.New(w, &slog.HandlerOptions{Level: level}, c.Format == "json"))
}

func startDemoAPI(addr string, log *slog.Logger) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("example API on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: exampleapi.New().Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	log.Info("example API listening", "addr", l.Addr().String())
	return srv, nil
}

// runOptions is what runServer needs besides the configuration.
type runOptions struct {
	// configPath is the file every policy reload reads; "" when the
	// configuration came from flags and defaults alone.
	configPath string
	// load is how the configuration was loaded; every policy reload of
	// configPath goes through it too.
	load func(string) (*config.Config, error)
	log  *slog.Logger
	// waitStore > 0 waits that long for the store before listening and
	// fails when it is still unreachable; 0 listens at once (see
	// lazy.Connector).
	waitStore time.Duration
	// hup delivers SIGHUP, which reloads the policy; nil in tests.
	hup <-chan os.Signal
	// version is what the build reports (buildversion.Resolve).
	version string
}

// runServer wires the store, metrics, policy reloader, proxy and admin
// listener, serves until ctx ends, then shuts down gracefully (see drain).
func runServer(ctx context.Context, cfg *config.Config, o runOptions) error {
	configPath, load, log, hup, version := o.configPath, o.load, o.log, o.hup, o.version
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tp, shutdownTracing, err := tracing.Setup(ctx, tracing.Config(cfg.Tracing), version, tracing.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() {
		// After the servers: the spans of the last requests are flushed too.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("tracing: flushing spans at shutdown failed", "err", err)
		}
	}()
	e, err := engine.New(ctx, engine.Options{
		Config: cfg, Logger: log, Registerer: reg, Version: version, TracerProvider: tp,
		WaitStore: o.waitStore, WaitName: "--wait-store",
	})
	if err != nil {
		return err
	}
	// Deferred after shutdownTracing, so it runs before: the store stays
	// open until the servers have drained.
	defer e.Close()

	// restartKeys is what the last accepted reload changed that only a
	// restart applies; written by Load and read by RestartKeys, which the
	// reloader serializes.
	var restartKeys []string
	// Certificate and CA files: read again when they change and on every
	// SIGHUP, before the policy reload that signal also asks for.
	tlsReloads, err := metrics.NewTLSReloads(reg)
	if err != nil {
		return err
	}
	tlsFiles, err := cfg.OpenTLSFiles(log, tlsReloads.Observe)
	if err != nil {
		return err
	}
	policyHup := hup
	if hup != nil {
		fwd := make(chan os.Signal, 1)
		policyHup = fwd
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case sig, ok := <-hup:
					if !ok {
						close(fwd)
						return
					}
					tlsFiles.Reload()
					select {
					case fwd <- sig:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	reloader, err := reload.New(reload.Options{
		Path: configPath,
		Load: func(path string) (*policy.Policy, error) {
			c, err := load(path)
			if err != nil {
				return nil, err
			}
			restartKeys = config.RestartKeys(cfg, c)
			// jwks_file keys are read again with the config they belong to.
			if err := e.Bind(ctx, c.Policy); err != nil {
				return nil, err
			}
			return c.Policy, nil
		},
		Initial:     cfg.Policy,
		Logger:      log,
		Registerer:  reg,
		Signals:     policyHup,
		RestartKeys: func() []string { return restartKeys },
	})
	if err != nil {
		return err
	}

	upstreamTransport := newUpstreamTransport(cfg, tlsFiles)
	if cfg.Upstream.TLS.InsecureSkipVerify {
		log.Warn("INSECURE: upstream.tls.insecure_skip_verify is true: idemgate accepts ANY certificate from the upstream, so anyone on the path can read and answer its requests; use upstream.tls.ca_file instead")
	}
	p, err := e.Proxy(engine.ProxyOptions{
		Transport: upstreamTransport,
		Policy:    reloader.Current,
		// Layout 1 records sit under route names of earlier policies too.
		PreviousPolicies: reloader.Previous,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           tracing.Handler(p, tp, tracing.Propagator()),
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		// Failed TLS handshakes are counted and logged at debug,
		// rate-limited; every other server error is a warning.
		ErrorLog:  serverlog.New(serverlog.Options{Logger: log, Count: e.Metrics().TLSHandshakeError}),
		Protocols: listenerProtocols(cfg.Server.H2C),
	}
	var draining atomic.Bool
	adminSrv := &http.Server{
		Handler: admin.New(admin.Options{
			Store:    e.Store(),
			V1Lookup: cfg.Store.V1Lookup,
			Policy:   reloader.Current,
			Gatherer: reg,
			Token:    cfg.Admin.Token,
			Logger:   log,
			Draining: draining.Load,
			// The record identity the proxy derives (pass_host, scheme).
			Scoping:    identity.Scoping{PassHost: cfg.Upstream.PassHost},
			ProxyHTTPS: cfg.Server.TLS.Enabled(),
			// idemgate_store_up follows every /readyz store check.
			StoreChecked: e.StoreChecked,
			// /readyz names jwt key sets that hold no keys yet.
			KeySets: e.Keys().Unready,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serverTLS := tlsFiles.Server()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if serverTLS != nil {
		// The certificate comes from GetCertificate and the client CAs
		// from GetConfigForClient, which re-read the files when
		// cert-manager rotates them.
		srv.TLSConfig = serverTLS
		ln = tls.NewListener(ln, serverTLS)
	}
	adminLn, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listen %s: %w", cfg.Admin.Listen, err)
	}
	// addr and admin are the addresses bound, so a port 0 in the config
	// shows as the port the system picked.
	log.Info("idemgate listening", "version", version, "addr", ln.Addr().String(), "admin", adminLn.Addr().String(),
		"upstream", cfg.Upstream.URL.String(), "store", cfg.Store.Driver, "max_store_waiting", cfg.Server.MaxStoreWaiting, "routes", len(reloader.Current().Routes()),
		"tls", serverTLS != nil, "client_auth", cfg.Server.TLS.ClientAuth, "h2c", cfg.Server.H2C)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ignoreClosed(srv.Serve(ln)) })
	g.Go(func() error { return ignoreClosed(adminSrv.Serve(adminLn)) })
	g.Go(func() error {
		// Also without a config file: Run answers SIGHUP there with a log
		// line that there is nothing to reload.
		return reloader.Run(gctx)
	})
	g.Go(func() error {
		<-gctx.Done()
		draining.Store(true)
		return drain(srv, adminSrv, p, cfg.Server.ShutdownTimeout, log)
	})
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("idemgate stopped")
	return nil
}

// byHost sends requests for host through global and all others through
// others.
type byHost struct {
	host           string
	global, others http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b *byHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == b.host {
		return b.global.RoundTrip(r)
	}
	return b.others.RoundTrip(r)
}

// jwksCheckTimeout bounds validate's read of each jwks_url.
const jwksCheckTimeout = 5 * time.Second

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// listenerProtocols returns the proxy http.Server's Protocols: nil (net/http's
// default: HTTP/1.1, and HTTP/2 where TLS negotiates it) unless h2c
// (server.h2c, which config refuses with server.tls): then HTTP/1.1 and
// HTTP/2 with prior knowledge on the plain listener, net/http's own
// implementation (http.Protocols.SetUnencryptedHTTP2). With h2c off, the
// HTTP/2 preface that reaches the proxy is answered with a GOAWAY saying
// to enable server.h2c, another PRI request 505 (proxy: http2-preface).
func listenerProtocols(h2c bool) *http.Protocols {
	if !h2c {
		return nil
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}
