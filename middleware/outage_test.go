package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/proxy"
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

// TestStoreDownRefusesAtOnce: once the connector finds the store down (a
// killed valkey-server, idemgate_store_up 0), keyed requests are refused
// 503 store-unavailable with Retry-After at once, not after the store
// timeout, the completed key the replay cache holds included; a fail_open
// route still runs its handler, unprotected. Once valkey-server is back
// and the connector has seen it, keyed requests run once and replay again.
func TestStoreDownRefusesAtOnce(t *testing.T) {
	// Kept on disk: the records written before the kill are there after.
	srv := valkeytest.Start(t, valkeytest.WithAOF())
	h := newOrders()
	reg := prometheus.NewRegistry()
	closed := serveWith(t, testConfig(srv.Addr(), "down:"), h, reg)
	openH := newOrders()
	open := serveWith(t, testConfig(srv.Addr(), "down-open:")+"    on_store_error: fail_open\n", openH, prometheus.NewRegistry())

	done := mustPost(t, closed.URL, "alice", "k-done", `{"item":1}`)
	if done.status != http.StatusCreated {
		t.Fatalf("before the outage: %d %s", done.status, done.body)
	}
	// Read again so the replay cache holds the completed record.
	if a := mustPost(t, closed.URL, "alice", "k-done", `{"item":1}`); a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry before the outage not replayed: %d %s", a.status, a.body)
	}

	srv.Kill()
	waitGauge(t, reg, "idemgate_store_up", 0)
	// Well under the store timeout: each request waited for all of it
	// (1.5 s and more on a refused connection) before the connector's
	// state was consulted.
	const fast = proxy.DefaultStoreTimeout / 2
	for _, key := range []string{"k-new-1", "k-new-2", "k-done"} {
		start := time.Now()
		a := mustPost(t, closed.URL, "alice", key, `{"item":1}`)
		took := time.Since(start)
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "store-unavailable") || a.header.Get("Retry-After") == "" {
			t.Fatalf("key %s with the store down: %d Retry-After=%q %s; want 503 store-unavailable with Retry-After", key, a.status, a.header.Get("Retry-After"), a.body)
		}
		if took >= fast {
			t.Errorf("key %s refused after %v with the store down; want at once (under %v, the store timeout is %v)", key, took, fast, proxy.DefaultStoreTimeout)
		}
	}
	if n := h.total.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1 (only before the outage)", n)
	}
	if a := mustPost(t, open.URL, "alice", "k-open", `{"item":1}`); a.status != http.StatusCreated || openH.runsOf("k-open") != 1 {
		t.Fatalf("fail_open route with the store down: %d %s, ran %d; want its handler run unprotected", a.status, a.body, openH.runsOf("k-open"))
	}

	srv.Restart()
	back := time.Now()
	waitGauge(t, reg, "idemgate_store_up", 1)
	t.Logf("the connector saw the store back after %v", time.Since(back))
	a := mustPost(t, closed.URL, "alice", "k-new-1", `{"item":1}`)
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("first keyed request once the store is back: %d %s", a.status, a.body)
	}
	if r := mustPost(t, closed.URL, "alice", "k-new-1", `{"item":1}`); r.header.Get("Idempotent-Replayed") != "true" || r.body != a.body {
		t.Fatalf("retry once the store is back: %d %s; want the replay of %s", r.status, r.body, a.body)
	}
	if r := mustPost(t, closed.URL, "alice", "k-done", `{"item":1}`); r.header.Get("Idempotent-Replayed") != "true" || r.body != done.body {
		t.Fatalf("the key completed before the outage: %d %s; want the replay of %s", r.status, r.body, done.body)
	}
	if h.runsOf("k-new-1") != 1 || h.runsOf("k-done") != 1 {
		t.Errorf("runs: k-new-1 %d, k-done %d; want 1 each", h.runsOf("k-new-1"), h.runsOf("k-done"))
	}
}

// serveWith wraps h in the middleware, its metrics in reg, on a loopback
// server.
func serveWith(t *testing.T, yaml string, h http.Handler, reg *prometheus.Registry) *httptest.Server {
	t.Helper()
	idem := middlewaretest.EngineWith(t, yaml, middleware.Options{Registerer: reg, WaitStore: 10 * time.Second})
	srv := httptest.NewServer(idem(h))
	t.Cleanup(srv.Close)
	return srv
}

// waitGauge waits, up to 15 s, for the unlabelled gauge name in reg to
// read want.
func waitGauge(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	if !gatetest.Until(15*time.Second, func() bool {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == name && len(f.GetMetric()) == 1 && f.GetMetric()[0].GetGauge().GetValue() == want {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s never read %v", name, want)
	}
}

// TestTakeoverRouteAnswersOnlyARecordedResponse: the store dies while the
// handler runs, so its response cannot be recorded. On an on_abandoned:
// takeover route the client is not handed that response (if this process
// died before recording it, a retry would take the claim over and run the
// handler again after the client had been told the first run's result):
// it gets 503 store-unavailable with Retry-After, and once the store is
// back its retry gets the handler's response replayed, the handler having
// run once. The proxy and the Caddy module share this engine.
func TestTakeoverRouteAnswersOnlyARecordedResponse(t *testing.T) {
	srv := valkeytest.Start(t, valkeytest.WithAOF())
	h := newOrders()
	var killOnce sync.Once
	kill := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		killOnce.Do(srv.Kill) // the handler acts; the store is gone when it answers
		h.ServeHTTP(w, r)
	})
	gate := serveWith(t, testConfig(srv.Addr(), "held:")+"    on_abandoned: takeover\n", kill, prometheus.NewRegistry())

	first := mustPost(t, gate.URL, "alice", "k-held", `{"item":1}`)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "store-unavailable") || first.header.Get("Retry-After") == "" {
		t.Fatalf("the handler's response could not be recorded: %d Retry-After=%q %s; want 503 store-unavailable with Retry-After", first.status, first.header.Get("Retry-After"), first.body)
	}
	srv.Restart()
	var retry answer
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if retry = mustPost(t, gate.URL, "alice", "k-held", `{"item":1}`); retry.status != http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s once the store is back", retry.status, retry.body)
		}
	}
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry once the store is back: %d %s; want the recorded response replayed", retry.status, retry.body)
	}
	if n := h.runsOf("k-held"); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// TestClosedWhileStoreDownStaysClosed: a middleware whose context ends
// while its Valkey is down (a service, or a Caddy site reloaded onto other
// store settings, during an outage) connects to nothing once Valkey is
// back. Both orders: the store was connected before the outage, and it
// never was.
func TestClosedWhileStoreDownStaysClosed(t *testing.T) {
	for _, connected := range []bool{true, false} {
		t.Run(fmt.Sprintf("connected=%v", connected), func(t *testing.T) {
			port := valkeytest.FreePort(t)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			var srv *valkeytest.Server
			if connected {
				srv = valkeytest.Start(t, valkeytest.WithPort(port))
			}
			cfg, err := config.Parse([]byte(testConfig(addr, "closed:")), nil, config.InProcess())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			gate := httptest.NewServer(idem(newOrders()))
			if connected {
				if a := mustPost(t, gate.URL, "alice", "k-1", `{"item":1}`); a.status != http.StatusCreated {
					t.Fatalf("keyed request with the store up: %d %s", a.status, a.body)
				}
				srv.Kill()
			}
			gate.Close()
			cancel()
			if connected {
				srv.Restart()
			} else {
				srv = valkeytest.Start(t, valkeytest.WithPort(port))
			}
			// A client left running reconnects within its backoff (at
			// most a second); sampled for 4s, the last sample decides,
			// so a connection attempt already under way at cancel, which
			// the connector closes at once, does not count.
			var list string
			for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
				if list, err = srv.CLI("CLIENT", "LIST"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if strings.Contains(list, "name=idemgate") {
				t.Fatalf("a middleware whose context ended is connected to Valkey 4s after it came back:\n%s", list)
			}
		})
	}
}
