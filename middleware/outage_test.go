package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestNewWithTheStoreDownStartsFailClosed: a service starts while its
// Valkey is down, as the standalone proxy does. Keyed requests are refused
// 503 store-unavailable without reaching the handler, others pass; once a
// valkey-server listens on the configured address, the same request runs
// once and its retry is replayed.
func TestNewWithTheStoreDownStartsFailClosed(t *testing.T) {
	port := valkeytest.FreePort(t) // nobody listens there yet
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg, err := config.Parse([]byte(testConfig(addr, "outage:")), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	start := time.Now()
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		t.Fatalf("New with the store down: %v; want it to start and refuse keyed requests until the store is there", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("New took %v with the store down; want it to return at once", took)
	}
	h := newOrders()
	gate := httptest.NewServer(idem(h))
	t.Cleanup(gate.Close)

	a := mustPost(t, gate.URL, "alice", "k-outage", `{"item":1}`)
	if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "store-unavailable") {
		t.Fatalf("keyed request with the store down: %d %s; want 503 store-unavailable", a.status, a.body)
	}
	if n := h.total.Load(); n != 0 {
		t.Fatalf("the handler ran %d times while the store was down", n)
	}
	resp, err := http.Get(gate.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "passthrough GET /health" {
		t.Fatalf("a request no route enforces, store down: %d %q; want it to reach the handler", resp.StatusCode, b)
	}

	valkeytest.Start(t, valkeytest.WithPort(port))
	// The connection loop retries at least once a second; every refused
	// attempt here is a 503 that ran nothing.
	deadline := time.Now().Add(15 * time.Second)
	for {
		a = mustPost(t, gate.URL, "alice", "k-outage", `{"item":1}`)
		if a.status != http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s 15s after valkey-server started", a.status, a.body)
		}
		if n := h.total.Load(); n != 0 {
			t.Fatalf("the handler ran %d times while the store was down", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("first keyed request once the store is up: %d replayed=%q %s", a.status, a.header.Get("Idempotent-Replayed"), a.body)
	}
	retry := mustPost(t, gate.URL, "alice", "k-outage", `{"item":1}`)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || retry.body != a.body {
		t.Fatalf("retry: %d replayed=%q %s; want the replay of %s", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body, a.body)
	}
	if n := h.runsOf("k-outage"); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// TestNewWaitStore: with Options.WaitStore, New waits that long for the
// store and fails, wrapping store.ErrUnavailable, if it is still down.
func TestNewWaitStore(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	cfg, err := config.Parse([]byte(testConfig(addr, "wait:")), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	start := time.Now()
	_, err = middleware.New(ctx, middleware.Options{Config: cfg, WaitStore: 300 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "WaitStore") {
		t.Fatalf("New with WaitStore and the store down: %v; want an error naming WaitStore that wraps store.ErrUnavailable", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("New failed after %v, before WaitStore ended", took)
	}

	srv := valkeytest.Start(t)
	cfg, err = config.Parse([]byte(testConfig(srv.Addr(), "wait:")), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := middleware.New(ctx, middleware.Options{Config: cfg, WaitStore: 5 * time.Second}); err != nil {
		t.Fatalf("New with WaitStore and the store up: %v", err)
	}
}

// TestNewStoreConfigErrorsFailNew: what no waiting can fix still fails New
// at once, for a configuration built in Go (config.Load would have
// refused it).
func TestNewStoreConfigErrorsFailNew(t *testing.T) {
	for name, set := range map[string]func(c *config.Config){
		"valkey without addrs": func(c *config.Config) { c.Store.Driver, c.Store.Valkey.Addrs = config.DriverValkey, nil },
		"valkey addr not host:port": func(c *config.Config) {
			c.Store.Driver, c.Store.Valkey.Addrs = config.DriverValkey, []string{"nowhere"}
		},
		"postgres DSN unparsable": func(c *config.Config) {
			c.Store.Driver, c.Store.Postgres.DSN = config.DriverPostgres, "postgres://%zz"
		},
		"unknown driver": func(c *config.Config) { c.Store.Driver = "etcd" },
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(testConfig("127.0.0.1:1", "cfg:")), nil, config.InProcess())
			if err != nil {
				t.Fatal(err)
			}
			set(cfg)
			_, err = middleware.New(context.Background(), middleware.Options{Config: cfg})
			if err == nil || !strings.Contains(err.Error(), "store.") {
				t.Fatalf("New: %v; want the store configuration error", err)
			}
		})
	}
}
