package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/bolt"
)

// TestBoltLockedAtStartConnectsLater: the bolt store goes through the
// same connector as the server stores, as in the standalone proxy. A file
// another process holds locked (the previous instance of a rolling
// restart, here another opener) does not fail New: keyed requests are
// refused 503 store-unavailable, running nothing, and once the lock is
// let go the connector opens the file, idemgate_store_up turns 1, and the
// same key runs once and replays.
func TestBoltLockedAtStartConnectsLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	holder, err := bolt.New(path)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			_ = holder.Close()
		}
	})
	cfg, err := config.Parse(fmt.Appendf(nil, `
store: {driver: bolt, bolt: {path: %q}}
log: {access: false}
defaults: {owner: "header:X-User"}
routes:
  - name: orders
    match: "POST /v1/orders"
`, path), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg := prometheus.NewRegistry()
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg, Registerer: reg})
	if err != nil {
		t.Fatalf("New with the bolt file locked: %v; want it to start and refuse keyed requests until the file opens", err)
	}
	h := newOrders()
	gate := httptest.NewServer(idem(h))
	t.Cleanup(gate.Close)

	if a := mustPost(t, gate.URL, "alice", "k-bolt", `{"item":1}`); a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "store-unavailable") {
		t.Fatalf("keyed request with the bolt file locked: %d %s; want 503 store-unavailable", a.status, a.body)
	}
	if g := gauge(t, reg, "idemgate_store_up"); g != 0 {
		t.Fatalf("idemgate_store_up %v with the file locked, want 0", g)
	}
	released = true
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	waitGauge(t, reg, "idemgate_store_up", 1)
	first := mustPost(t, gate.URL, "alice", "k-bolt", `{"item":1}`)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("first keyed request once the file opened: %d %s", first.status, first.body)
	}
	if r := mustPost(t, gate.URL, "alice", "k-bolt", `{"item":1}`); r.header.Get("Idempotent-Replayed") != "true" || r.body != first.body {
		t.Fatalf("retry: %d %s; want the replay of %s", r.status, r.body, first.body)
	}
	if n := h.runsOf("k-bolt"); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
