package middleware_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
)

// A Go service that takes idempotency keys on POST /v1/orders: the same
// idemgate.yaml as the proxy's (routes, owner, store: README, "Inside your
// Go service"), without upstream.url, read with config.InProcess. Its
// metrics are served on a listener of their own, on loopback.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg, err := config.Load("idemgate.yaml", os.Environ(), config.InProcess())
	if err != nil {
		log.Fatal(err)
	}
	closed := make(chan struct{}) // the middleware has closed (below)
	idem, err := middleware.New(ctx, middleware.Options{
		Config:     cfg,
		Logger:     slog.Default(),
		Registerer: prometheus.DefaultRegisterer, // one middleware per Registerer
		Closed:     closed,
	})
	if err != nil {
		log.Fatal(err) // e.g. a store section that is not valid
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		// Runs once per (owner, idempotency key); retries get this answer
		// replayed, byte for byte.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"ord_1"}`)
	})
	// idemgate_* (docs/operations.md, "Metrics") with Go's own, for Prometheus.
	go func() {
		log.Print(http.ListenAndServe("127.0.0.1:9090", promhttp.Handler()))
	}()
	// Loopback for a trial; ":8080" (every interface) when other machines
	// must reach it.
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: idem(mux)}
	// On the signal, Shutdown lets the calls in flight end and record
	// their responses; ListenAndServe returns as it begins, so main waits
	// for it, or the process would exit in the middle of those calls.
	// Then it waits for the middleware to close: a response the store
	// refused to record is recorded once the store answers again (bound
	// the wait by your grace period, e.g. with a select on a timer).
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
		close(stopped)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-stopped
	<-closed
}

// A gRPC service in process: the grpc.Server is the http.Handler behind
// the middleware (grpc-go's ServeHTTP), on an http.Server that speaks
// HTTP/2 without TLS (what grpc.WithTransportCredentials(insecure...)
// dials), HTTP/1.1 still served for the rest. The route is
// `match: "grpc orders.v1.Orders/Create"`; clients send the key as the
// idempotency-key metadata entry.
func ExampleNew_grpc() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg, err := config.Load("idemgate.yaml", os.Environ(), config.InProcess())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg, Registerer: prometheus.DefaultRegisterer})
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	// With generated code: ordersv1.RegisterOrdersServer(gs, impl).
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "orders.v1.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Create", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return wrapperspb.String("ord_1 for " + in.GetValue()), nil // runs once per key
		}}},
	}, nil)
	mux := http.NewServeMux()
	mux.Handle("POST /orders.v1.Orders/", gs)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c: gRPC without TLS
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: idem(mux), Protocols: &protocols}
	// On the signal, Shutdown lets the calls in flight end and record
	// their responses; ListenAndServe returns as it begins, so main waits
	// for it, or the process would exit in the middle of those calls.
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
		close(stopped)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-stopped
}

// httputil.ReverseProxy as the handler: a backend that could not be
// reached releases the key, and one that failed after it got the request
// leaves the outcome unknown (the retry is refused, never sent on), and
// net/http never sends a bodiless keyed request a second time by itself.
func ExampleReverseProxyErrorHandler() {
	cfg, err := config.Load("idemgate.yaml", os.Environ(), config.InProcess())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := middleware.New(context.Background(), middleware.Options{Config: cfg})
	if err != nil {
		log.Fatal(err)
	}
	backend, _ := url.Parse("http://127.0.0.1:3000")
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(backend) },
		Transport:    middleware.ReverseProxyTransport(nil),
		ErrorHandler: middleware.ReverseProxyErrorHandler(slog.Default()),
	}
	log.Fatal(http.ListenAndServe(":8080", idem(rp)))
}

// A handler that refuses before it acts, and one whose payment provider
// took the charge and then dropped the connection.
func ExampleOutcomeUnknown() {
	charge := func(r *http.Request) error { return nil } // your provider's client
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Account") == "" {
			middleware.NothingDone(r) // nothing was done: a retry may run
			http.Error(w, "no account", http.StatusBadRequest)
			return
		}
		if err := charge(r); err != nil {
			// The provider may have charged: never run this key again.
			middleware.OutcomeUnknown(r, err)
			http.Error(w, "payment provider failed", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	_ = h
}
