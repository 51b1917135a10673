// Command idemgate is the idempotency-enforcing reverse proxy: serve, validate, demo, healthcheck and version.
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
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/exampleapi"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/reload"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/bolt"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/tracing"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `idemgate: an idempotency-enforcing reverse proxy

Usage:
  idemgate serve --config FILE        run the proxy (idemgate serve -h lists the flags that override the file)
  idemgate serve --upstream URL       run with built-in defaults and the memory store
  idemgate demo                       run an example API on 127.0.0.1:3000 behind idemgate on 127.0.0.1:8080
  idemgate validate --config FILE     check a config file and print every route's effective policy
  idemgate migrate --config FILE      create the Postgres store's table when missing (store.driver: postgres), nothing else
  idemgate healthcheck [--url URL]    exit 0 when the admin /healthz answers 200 (container health check)
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
	case "healthcheck":
		return healthcheck(args[1:], stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "idemgate %s %s\n", version, runtime.Version())
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
	fmt.Fprintf(stdout, "%s is valid. Upstream %s, store %s.\n\n", *path, cfg.Upstream.URL, cfg.Store.Driver)
	if err := cfg.Policy.Describe(stdout); err != nil {
		fmt.Fprintf(stderr, "idemgate validate: %v\n", err)
		return 1
	}
	return 0
}

// parseExit is the exit code for a flag parsing error: 0 when help was
// asked for (-h), 2 for a usage error.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func healthcheck(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "http://127.0.0.1:9090/healthz", "health endpoint to GET")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(*target)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate healthcheck: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "idemgate healthcheck: %s answered %s\n", *target, resp.Status)
		return 1
	}
	return 0
}

// serveFlags are the command-line overrides of serve and demo.
type serveFlags struct {
	config, upstream, listen, adminListen, storeDriver, valkeyAddrs, boltPath, postgresDSN, logFormat, logLevel string
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
	cfg, err := loadConfig(f)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate %s: invalid configuration:\n", name)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
		return 1
	}
	log := newLogger(cfg.Log, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var demoAPI *http.Server
	if demo {
		demoAPI, err = startDemoAPI(cfg.Upstream.URL.Host, log)
		if err != nil {
			log.Error("cannot start the example API", "err", err)
			return 1
		}
		defer demoAPI.Close()
	}
	if err := runServer(ctx, cfg, f.config, log); err != nil {
		log.Error("idemgate stopped", "err", err)
		return 1
	}
	return 0
}

// loadConfig reads the file (or the built-in defaults), applies flag
// overrides and validates the result.
func loadConfig(f serveFlags) (*config.Config, error) {
	environ := os.Environ()
	if f.upstream != "" {
		// Through the environment, so a file without upstream.url loads and
		// the flag is checked like the key it overrides.
		environ = append(environ, config.EnvName("upstream.url")+"="+f.upstream)
	}
	cfg, err := config.Load(f.config, environ)
	if err != nil {
		return nil, err
	}
	if f.listen != "" {
		cfg.Listen = f.listen
	}
	if f.adminListen != "" {
		cfg.Admin.Listen = f.adminListen
	}
	if f.storeDriver != "" {
		cfg.Store.Driver = f.storeDriver
	}
	if f.valkeyAddrs != "" {
		cfg.Store.Valkey.Addrs = strings.Split(f.valkeyAddrs, ",")
	}
	if f.boltPath != "" {
		cfg.Store.Bolt.Path = f.boltPath
	}
	if f.postgresDSN != "" {
		cfg.Store.Postgres.DSN = f.postgresDSN
	}
	if f.logFormat != "" {
		cfg.Log.Format = f.logFormat
	}
	if f.logLevel != "" {
		cfg.Log.Level = f.logLevel
	}
	return cfg, cfg.Validate()
}

func newLogger(c config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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

// openStore builds the configured store driver.
// onDisruption is called by the store when it may have been unreachable
// without any request noticing (see proxy.Proxy.NoteStoreFailure).
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger, onDisruption func()) (store.Store, error) {
	switch cfg.Store.Driver {
	case config.DriverMemory:
		log.Warn("using the in-memory store: records are lost on restart and not shared between instances; use store.driver: valkey in production")
		return memory.New(), nil
	case config.DriverValkey:
		v := cfg.Store.Valkey
		var tlsConfig *tls.Config
		if v.TLS {
			tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		return valkey.New(ctx, valkey.Options{
			Addrs:          v.Addrs,
			Username:       v.Username,
			Password:       v.Password,
			TLS:            tlsConfig,
			KeyPrefix:      v.KeyPrefix,
			SentinelMaster: v.SentinelMaster,
			Logger:         log,
			OnDisruption:   onDisruption,
		})
	case config.DriverPostgres:
		return openPostgres(ctx, cfg.Store.Postgres, log, onDisruption)
	case config.DriverBolt:
		b, err := bolt.New(cfg.Store.Bolt.Path, bolt.WithLogger(log))
		if err != nil {
			return nil, err
		}
		log.Warn("using the bolt store: records survive restarts on this machine, but only one process can open the file, so run a single instance; use store.driver: valkey to share records between instances",
			"path", cfg.Store.Bolt.Path)
		return b, nil
	}
	return nil, fmt.Errorf("store driver %q is not available in this build", cfg.Store.Driver)
}

// runServer wires the store, metrics, policy reloader, proxy and admin
// listener, serves until ctx ends, then shuts down gracefully: it stops
// accepting, lets in-flight requests finish and record, then returns.
func runServer(ctx context.Context, cfg *config.Config, configPath string, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, version)
	if err != nil {
		return err
	}
	tp, shutdownTracing, err := tracing.Setup(ctx, cfg.Tracing, version, tracing.WithLogger(log))
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
	propagator := tracing.Propagator()
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	// The store exists before the proxy it reports disruptions to.
	var gate atomic.Pointer[proxy.Proxy]
	st, err := openStore(openCtx, cfg, log, func() {
		if p := gate.Load(); p != nil {
			p.NoteStoreFailure()
		}
	})
	cancel()
	if err != nil {
		return fmt.Errorf("opening the %s store: %w", cfg.Store.Driver, err)
	}
	defer st.Close()
	st = metrics.InstrumentStore(st, m)
	st = tracing.InstrumentStore(st, tp)

	hup := make(chan os.Signal, 1)
	if configPath != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	reloader, err := reload.New(reload.Options{
		Path: configPath,
		Load: func(path string) (*policy.Policy, error) {
			c, err := config.Load(path, os.Environ())
			if err != nil {
				return nil, err
			}
			return c.Policy, nil
		},
		Initial:    cfg.Policy,
		Logger:     log,
		Registerer: reg,
		Signals:    hup,
	})
	if err != nil {
		return err
	}

	p, err := proxy.New(proxy.Options{
		Upstream:  cfg.Upstream.URL,
		Timeout:   cfg.Upstream.Timeout,
		Store:     st,
		Policy:    reloader.Current,
		Transport: tracing.Transport(proxy.NewTransport(cfg.Upstream.Timeout), tp, propagator),
		Logger:    log,
		Metrics:   m,
		V1Lookup:  cfg.Store.V1Lookup,
	})
	if err != nil {
		return err
	}
	gate.Store(p)
	srv := &http.Server{
		Handler:           tracing.Handler(p, tp, propagator),
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	adminSrv := &http.Server{
		Handler: admin.New(admin.Options{
			Store:    st,
			Policy:   reloader.Current,
			Gatherer: reg,
			Token:    cfg.Admin.Token,
			Logger:   log,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	adminLn, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listen %s: %w", cfg.Admin.Listen, err)
	}
	log.Info("idemgate listening", "version", version, "addr", ln.Addr().String(), "admin", adminLn.Addr().String(),
		"upstream", cfg.Upstream.URL.String(), "store", cfg.Store.Driver, "routes", len(reloader.Current().Routes()))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ignoreClosed(srv.Serve(ln)) })
	g.Go(func() error { return ignoreClosed(adminSrv.Serve(adminLn)) })
	g.Go(func() error {
		if configPath == "" {
			<-gctx.Done()
			return nil
		}
		return reloader.Run(gctx)
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down: no new connections, waiting for requests in flight")
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
		defer cancel()
		// Shutdown waits for running handlers; a handler returns once its
		// outcome is recorded or handed to the proxy's background retry.
		err := srv.Shutdown(sctx)
		// Responses the store refused during an outage are still being
		// recorded in the background; give them the rest of the budget.
		if werr := p.Wait(sctx); werr != nil && err == nil {
			err = werr
		}
		_ = adminSrv.Shutdown(sctx)
		if err != nil {
			return fmt.Errorf("graceful shutdown: %w", err)
		}
		return nil
	})
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("idemgate stopped")
	return nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
