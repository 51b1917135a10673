package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareWrappedPerRequestSharesOneEngine: a router that wraps its
// matched handler in the middleware on every request, as gorilla/mux's Use
// does, gets one engine for all of them: server.max_waiters bounds the
// waiters of every request together. With a proxy per wrap, each request
// had slots of its own (and each proxy stayed in the engine for good), so
// a second waiter was let in where the configuration allows one.
func TestMiddlewareWrappedPerRequestSharesOneEngine(t *testing.T) {
	vk := valkeytest.Start(t)
	yaml := testConfig(vk.Addr(), "perrequest:") + "server:\n  max_waiters: 1\n"
	reg := prometheus.NewRegistry()
	mw := middlewaretest.EngineWith(t, yaml, middleware.Options{Registerer: reg})
	h := newOrders()
	router := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw(h).ServeHTTP(w, r) // a wrap per request
	})
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)

	const body = `{"sleep":"2s"}`
	first := make(chan answer, 1)
	go func() { first <- mustPost(t, srv.URL, "alice", "k-per-request", body) }()
	if !gatetest.Until(10*time.Second, func() bool { return h.runsOf("k-per-request") == 1 }) {
		t.Fatal("the first request never reached the handler")
	}
	waiter := make(chan answer, 1)
	go func() { waiter <- mustPost(t, srv.URL, "alice", "k-per-request", body) }()
	waitGauge(t, reg, "idemgate_waiters", 1)

	over := mustPost(t, srv.URL, "alice", "k-per-request", body)
	if over.status != http.StatusConflict {
		t.Errorf("a second waiter with server.max_waiters 1: %d %s; want 409 at once (every slot taken)", over.status, over.body)
	}
	f, w := <-first, <-waiter
	if f.status != http.StatusCreated || w.status != http.StatusCreated || w.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("first %d, waiter %d replayed=%q; want 201 and its replay", f.status, w.status, w.header.Get("Idempotent-Replayed"))
	}
	if n := h.runsOf("k-per-request"); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
