package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/memory"
)

// TestSharedStoreOutlivesAMiddleware: a host that replaces its middleware
// (a configuration reload) on one SharedStore, here the memory store,
// which a store per middleware would lose: a call in flight in the old
// middleware, whose ctx has ended, keeps its claim; its duplicate at the
// new middleware waits for it and is replayed its answer, as is a retry
// after; the handler runs once.
func TestSharedStoreOutlivesAMiddleware(t *testing.T) {
	cfg, err := config.Parse([]byte(`
log:
  access: false
defaults:
  owner: header:X-User
  lease: 3s
  wait_timeout: 10s
`), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	shared, err := middleware.OpenShared(cfg, middleware.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })

	var runs atomic.Int64
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-hold
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":1}`))
	})
	build := func(ctx context.Context, reg prometheus.Registerer) http.Handler {
		t.Helper()
		idem, err := middleware.New(ctx, middleware.Options{Config: cfg, Shared: shared, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		return idem(h)
	}
	oldCtx, unload := context.WithCancel(context.Background())
	defer unload()
	var current atomic.Pointer[http.Handler]
	old := build(oldCtx, nil)
	current.Store(&old)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*current.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(gate.Close)

	first := make(chan answer, 1)
	go func() { first <- mustPost(t, gate.URL, "alice", "k-shared", `{"item":1}`) }()
	for runs.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	reg := prometheus.NewRegistry()
	next := build(context.Background(), reg)
	current.Store(&next)
	unload()

	dup := make(chan answer, 1)
	go func() { dup <- mustPost(t, gate.URL, "alice", "k-shared", `{"item":1}`) }()
	// The duplicate waits on the claim (the new middleware's waiters
	// gauge), or, finding none, runs.
	for runs.Load() < 2 && gauge(t, reg, "idemgate_waiters") < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	close(hold)
	f, d := <-first, <-dup
	if f.status != http.StatusCreated || d.status != http.StatusCreated || d.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, duplicate %d replayed=%q %s", f.status, f.body, d.status, d.header.Get("Idempotent-Replayed"), d.body)
	}
	if a := mustPost(t, gate.URL, "alice", "k-shared", `{"item":1}`); a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after: %d %s, not replayed", a.status, a.body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}

	if _, err := middleware.New(context.Background(), middleware.Options{Config: cfg, Shared: shared, Store: memory.New()}); err == nil {
		t.Fatal("New with both Shared and Store: no error")
	}
}

// gauge is the value of the gauge name, without labels, on reg (0 while
// it has none).
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	return 0
}
