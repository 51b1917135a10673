package middleware_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// The middleware's allocation ceilings: each exchange goes through a real
// net/http server on a loopback port, the handler wrapped by
// middleware.New as a service wires it (metrics on a registry, a JSON
// logger, no access line: Options.AccessLog's default), and is counted whole, client and handler included, with
// testing.AllocsPerRun, as proxy's TestHotPathAllocationCeilings counts
// the standalone proxy's. A change that adds allocations to one of these
// paths raises its ceiling (allocs_race_off_test.go,
// allocs_race_on_test.go) in the same commit and says why; one that
// removes some lowers it, so the next regression shows.

// allocRuns is how many exchanges each ceiling averages over: enough that
// a background allocation (a pub/sub message, a fence PING) moves the
// mean by less than one.
const allocRuns = 200

// allocBody is the request of every exchange, the bench's size.
var allocBody = []byte(`{"amount":4200,"currency":"EUR","customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1}]}`)

// allocAnswer is what the handler answers, the bench handler's ~200 bytes.
var allocAnswer = []byte(`{"id":"ord_0000000000000001","status":"created","amount":4200,"currency":"EUR",` +
	`"customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],` +
	`"created_at":"2025-01-01T00:00:00Z","pad":"xxxxxxxxxxxx"}` + "\n")

// allocGate is the bench's handler (e2e/bench/upstream) wrapped by the
// middleware on a loopback server, with one keep-alive client.
type allocGate struct {
	tb     testing.TB
	url    string
	client *http.Client
	calls  atomic.Int64
	seq    atomic.Int64
}

// newAllocGate builds the middleware from the store section storeYAML.
func newAllocGate(tb testing.TB, storeYAML string) *allocGate {
	tb.Helper()
	g := &allocGate{tb: tb}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		g.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/orders/ord_0000000000000001")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(allocAnswer)
	})
	idem := middlewaretest.EngineWith(tb, storeYAML+`defaults:
  owner: header:X-User
  lease: 10s
  wait_timeout: 10s
routes:
  - name: orders
    match: "POST /v1/orders"
`, middleware.Options{
		Logger:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry(),
	})
	srv := httptest.NewServer(idem(h))
	tb.Cleanup(srv.Close)
	g.url = srv.URL
	g.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	tb.Cleanup(g.client.CloseIdleConnections)
	return g
}

// do sends a POST with key (none when empty) as user-1, expects a 201, and
// returns whether it was a replay.
func (g *allocGate) do(key string) bool {
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/orders", bytes.NewReader(allocBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", "user-1")
	if key != "" {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		g.tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		g.tb.Fatalf("POST key %q: status %d, want 201", key, resp.StatusCode)
	}
	return resp.Header.Get("Idempotent-Replayed") == "true"
}

// allocPath returns one exchange of the named path on g, after what it
// needs beforehand.
func allocPath(g *allocGate, name string) func() {
	switch name {
	case "fresh":
		return func() {
			before := g.calls.Load()
			if g.do("fresh-"+strconv.FormatInt(g.seq.Add(1), 10)) || g.calls.Load() != before+1 {
				g.tb.Fatal("a fresh key did not run the handler once")
			}
		}
	case "replay":
		g.do("replayed")
		return func() {
			if !g.do("replayed") {
				g.tb.Fatal("a retry was not replayed")
			}
		}
	case "passthrough":
		return func() { g.do("") }
	}
	g.tb.Fatalf("no path %s", name)
	return nil
}

// allocCeiling is the most allocations one exchange of a path may make
// (allocs_race_off_test.go, allocs_race_on_test.go).
type allocCeiling struct {
	path   string
	memory float64 // on the memory store
	valkey float64 // on Valkey with the replay cache at its default size
}

// TestMiddlewareAllocationCeilings holds the middleware's fresh key,
// replay and passthrough to their ceilings, on the memory store and on a
// real Valkey (replay cache on, the default). A path over its ceiling
// fails with the figure; one under it asks for the ceiling to come down.
func TestMiddlewareAllocationCeilings(t *testing.T) {
	for _, st := range []string{"memory", "valkey"} {
		t.Run(st, func(t *testing.T) {
			storeYAML := "store:\n  driver: memory\n"
			if st == "valkey" {
				srv := valkeytest.Start(t)
				storeYAML = fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [%q]\n", srv.Addr())
			}
			g := newAllocGate(t, storeYAML)
			for _, c := range middlewareCeilings {
				limit := c.memory
				if st == "valkey" {
					limit = c.valkey
				}
				gatetest.HoldAllocs(t, c.path, st, limit, ceilingSlack, allocRuns, allocPath(g, c.path))
			}
		})
	}
}

// BenchmarkMiddlewarePath sends one exchange after the other of each path
// through the middleware on a loopback server and a real Valkey (replay
// cache on), as TestMiddlewareAllocationCeilings does; with -cpuprofile,
// the functions of packages middleware and proxy are the middleware's own
// (the client and the handler run in the same process).
func BenchmarkMiddlewarePath(b *testing.B) {
	srv := valkeytest.Start(b)
	g := newAllocGate(b, fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [%q]\n    layout: 5\n", srv.Addr()))
	for _, name := range []string{"fresh", "replay", "passthrough"} {
		b.Run(name, func(b *testing.B) {
			g.tb = b
			run := allocPath(g, name)
			b.ReportAllocs()
			for b.Loop() {
				run()
			}
		})
	}
}
