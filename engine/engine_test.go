package engine_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/engine"
)

const memoryYAML = `
store:
  driver: memory
routes:
  - name: orders
    match: "POST /v1/orders"
    required: true
`

func parse(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(memoryYAML), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// counting is a handler that counts its runs and answers 201.
type counting struct{ runs int }

func (c *counting) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.runs++
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"ord_1"}`))
}

func send(t *testing.T, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://api.example/v1/orders", strings.NewReader(`{"amount":5}`))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", "order-1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// An engine built on a shared store (what Caddy keeps across a reload)
// finds the records of the engine before it, and closing the old engine
// leaves the store open for the new one: the retry after the "reload" is
// replayed, never run again.
func TestEnginesOnASharedStoreShareRecords(t *testing.T) {
	ctx := context.Background()
	cfg := parse(t)
	shared, err := engine.OpenStore(ctx, cfg, engine.StoreOptions{WaitStore: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })
	h := &counting{}

	before, err := engine.New(ctx, engine.Options{Config: cfg, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := before.Proxy(engine.ProxyOptions{Next: h})
	if err != nil {
		t.Fatal(err)
	}
	if rec := send(t, p1); rec.Code != http.StatusCreated {
		t.Fatalf("first request: %d %s", rec.Code, rec.Body)
	}

	after, err := engine.New(ctx, engine.Options{Config: parse(t), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = after.Close() })
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	p2, err := after.Proxy(engine.ProxyOptions{Next: h})
	if err != nil {
		t.Fatal(err)
	}
	rec := send(t, p2)
	if rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" || h.runs != 1 {
		t.Fatalf("retry on the new engine: %d replayed=%q, handler ran %d times; want 201 replayed and 1 run",
			rec.Code, rec.Header().Get("Idempotent-Replayed"), h.runs)
	}
}

// A second engine on one Registerer fails with ErrRegister, which callers
// tell from other failures (the Caddy module names its handlers then).
func TestSecondEngineOnOneRegistererIsErrRegister(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	first, err := engine.New(ctx, engine.Options{Config: parse(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() })
	second, err := engine.New(ctx, engine.Options{Config: parse(t), Registerer: reg})
	if err == nil {
		_ = second.Close()
		t.Fatal("a second engine on one Registerer was built; want ErrRegister")
	}
	if !errors.Is(err, engine.ErrRegister) {
		t.Fatalf("err = %v; want it to wrap ErrRegister", err)
	}
}
