package middleware_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
)

// A Go service that takes idempotency keys on POST /v1/orders: the same
// idemgate.yaml as the proxy's (routes, owner, store), without
// upstream.url, read with config.InProcess.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg, err := config.Load("idemgate.yaml", os.Environ(), config.InProcess())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := middleware.New(ctx, middleware.Options{
		Config:     cfg,
		Logger:     slog.Default(),
		Registerer: prometheus.DefaultRegisterer,
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
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: idem(mux)}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
