package proxy_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/fastslog"
	"github.com/idemgate/idemgate/internal/gatetest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/logbuf"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// The hot path's allocation ceilings (docs/performance.md, "Hot path
// budget"): each test below sends requests through a real idemgate on a
// loopback port (client, proxy and upstream in this process, as
// production wiring has them: metrics on, the JSON access log at info,
// the store behind metrics.InstrumentStore) and asserts the allocations
// of one whole exchange, client and upstream included, with
// testing.AllocsPerRun. Allocation counts do not depend on the machine's
// load, so these are ordinary tests; the throughput ratios stay in
// e2e/bench.
//
// A change that adds allocations to one of these paths raises its
// ceiling in the same commit and says why in the message; a change that
// removes some lowers it, so the next regression shows.

// allocRuns is how many exchanges each ceiling averages over: enough that
// a background allocation falling on either side of the measured window
// (a pub/sub message, a fence PING) moves the mean by less than one.
const allocRuns = 200

// gateStore wraps the store under test and counts the Gets that found the
// record running: the moment a waiter starts waiting on the store's
// notification, with no sleep.
type gateStore struct {
	store.Store
	running atomic.Int64
}

func (g *gateStore) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	rec, err := g.Store.Get(ctx, id)
	if err == nil && rec != nil && rec.State == store.Running {
		g.running.Add(1)
	}
	return rec, err
}

// CachedReplay keeps the replay cache of the store behind g.
func (g *gateStore) CachedReplay(ctx context.Context, id store.Identity) (*store.Record, store.CacheResult, error) {
	return store.CachedReplayOf(ctx, g.Store, id)
}

// loopbackGate is idemgate on a loopback port in front of a loopback
// upstream, with one keep-alive client.
type loopbackGate struct {
	tb     testing.TB
	url    string
	client *http.Client
	st     *gateStore
	calls  atomic.Int64
	// hold, when non-nil, is waited on by the upstream on /v1/slow.
	hold chan struct{}
	seq  atomic.Int64
}

// newLoopbackGate starts the upstream and idemgate on st (nil: a memory
// store), its access lines written as cmd/idemgate writes them with
// log.format json.
func newLoopbackGate(tb testing.TB, st store.Store) *loopbackGate {
	return newLoopbackGateLog(tb, st, slog.New(fastslog.New(io.Discard, nil, true)))
}

// newLoopbackGateLog is newLoopbackGate with log as the logger.
func newLoopbackGateLog(tb testing.TB, st store.Store, log *slog.Logger) *loopbackGate {
	tb.Helper()
	if st == nil {
		mem := memory.New()
		tb.Cleanup(func() { mem.Close() })
		st = mem
	}
	g := &loopbackGate{tb: tb, st: &gateStore{Store: st}, hold: make(chan struct{})}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/slow" {
			<-g.hold
		}
		g.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(cannedBody)
	}))
	labelConns(up.Config, "upstream")
	up.Start()
	tb.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	m, err := metrics.New(prometheus.NewRegistry(), "test")
	if err != nil {
		tb.Fatal(err)
	}
	route := baseRoute()
	route.MaxRequestBytes, route.MaxResponseBytes = 1<<20, 1<<20
	route.Lease = 10 * time.Second
	pol, err := policy.New(route, nil)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{
		Upstream: target,
		Store:    metrics.InstrumentStore(g.st, m),
		Policy:   func() *policy.Policy { return pol },
		Logger:   log,
		Metrics:  m,
	})
	if err != nil {
		tb.Fatal(err)
	}
	front := httptest.NewUnstartedServer(p)
	labelConns(front.Config, "gate")
	front.Start()
	tb.Cleanup(front.Close)
	g.url = front.URL
	g.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	tb.Cleanup(g.client.CloseIdleConnections)
	return g
}

// labelConns labels the goroutine of every connection srv serves, and the
// goroutines it starts (the upstream transport's), with side=name, so a
// CPU profile of the benchmarks tells the gate's samples from the
// client's and the upstream's (go tool pprof -tagfocus side=gate).
// Only when a CPU profile is asked for: a label set per request would
// count in the ceilings.
func labelConns(srv *http.Server, name string) {
	if f := flag.Lookup("test.cpuprofile"); f == nil || f.Value.String() == "" {
		return
	}
	labels := pprof.Labels("side", name)
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateActive {
			// Called on the connection's own goroutine.
			pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), labels))
		}
	}
}

// newLoopbackGateValkey is newLoopbackGate on a throwaway valkey-server
// with the replay cache on at its production default size.
func newLoopbackGateValkey(tb testing.TB) *loopbackGate {
	return newLoopbackGateValkeyLog(tb, slog.New(fastslog.New(io.Discard, nil, true)))
}

// newLoopbackGateValkeyLog is newLoopbackGateValkey with log as the logger.
func newLoopbackGateValkeyLog(tb testing.TB, log *slog.Logger) *loopbackGate {
	tb.Helper()
	srv := valkeytest.Start(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st *valkey.Store
	var err error
	// The client's goroutines (valkey-go's pipes) are the gate's CPU.
	pprof.Do(ctx, pprof.Labels("side", "gate"), func(ctx context.Context) {
		st, err = valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}, CacheBytes: 32 << 20})
	})
	if err != nil {
		tb.Fatalf("valkey store: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return newLoopbackGateLog(tb, st, log)
}

// do sends a POST of body to path with key (none when empty) as user-1
// and checks the status; it returns whether the answer was a replay.
func (g *loopbackGate) do(path, key string, body []byte, want int) bool {
	replayed, err := g.send(path, key, body, want)
	if err != nil {
		g.tb.Fatal(err)
	}
	return replayed
}

// send is do for any goroutine: it returns the error instead.
func (g *loopbackGate) send(path, key string, body []byte, want int) (bool, error) {
	req, _ := http.NewRequest(http.MethodPost, g.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", "user-1")
	if key != "" {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return false, fmt.Errorf("POST %s key %q: status %d, want %d", path, key, resp.StatusCode, want)
	}
	return resp.Header.Get(proxy.ReplayedHeader) == "true", nil
}

// fresh sends a request with a key never sent before.
func (g *loopbackGate) fresh() {
	g.do("/v1/orders", "fresh-"+strconv.FormatInt(g.seq.Add(1), 10), benchBody, http.StatusCreated)
}

// waitThenReplay sends two requests with one new key at once: one claims
// it and is held upstream, the other finds it running and waits on the
// store's notification. The held call is released once the duplicate
// waits (the store answered its Get with the record running: no sleep),
// and the duplicate must be answered with the replay.
func (g *loopbackGate) waitThenReplay() {
	key := "wait-" + strconv.FormatInt(g.seq.Add(1), 10)
	waiting := g.st.running.Load()
	replayed, errs := make(chan bool, 2), make(chan error, 2)
	for range 2 {
		go func() {
			r, err := g.send("/v1/slow", key, benchBody, http.StatusCreated)
			replayed <- r
			errs <- err
		}()
	}
	for g.st.running.Load() == waiting {
		runtime.Gosched()
	}
	g.hold <- struct{}{}
	a, b := <-replayed, <-replayed
	for range 2 {
		if err := <-errs; err != nil {
			g.tb.Fatal(err)
		}
	}
	if a == b {
		g.tb.Fatalf("replayed: %v and %v, want one forwarded and one replayed after its wait", a, b)
	}
}

// The paths under a ceiling, each one exchange of a loopbackGate.
var hotPaths = []struct {
	name  string
	setup func(g *loopbackGate) func()
}{
	{"fresh", func(g *loopbackGate) func() { return g.fresh }},
	{"replay", func(g *loopbackGate) func() {
		g.do("/v1/orders", "replayed", benchBody, http.StatusCreated)
		return func() {
			if !g.do("/v1/orders", "replayed", benchBody, http.StatusCreated) {
				g.tb.Fatal("a retry was not replayed")
			}
		}
	}},
	{"passthrough", func(g *loopbackGate) func() {
		return func() { g.do("/v1/orders", "", benchBody, http.StatusCreated) }
	}},
	{"mismatch422", func(g *loopbackGate) func() {
		g.do("/v1/orders", "reused", benchBody, http.StatusCreated)
		other := bytes.Clone(benchBody)
		other[len(other)-3] = 'y'
		return func() { g.do("/v1/orders", "reused", other, http.StatusUnprocessableEntity) }
	}},
	{"waitReplay", func(g *loopbackGate) func() { return g.waitThenReplay }},
}

// ceiling is the most allocations one exchange of a hot path may make:
// the figure measured when the ceiling was last set (allocs_race_off_test.go,
// allocs_race_on_test.go: the race detector's sync.Pool drops items at
// random, so a -race build allocates more, and its figures are a mean
// with some spread).
type ceiling struct {
	path   string
	memory float64 // on the memory store
	valkey float64 // on Valkey with the replay cache on
}

// TestHotPathAllocationCeilings holds every hot path (fresh key, replay,
// passthrough, a 422 for a key reused with another body, a duplicate that
// waits and is answered with the replay) to its ceiling, on the memory
// store and on Valkey (with the replay cache on, as idemgate's default).
// A path over its ceiling fails with the figure; one well under it asks
// for the ceiling to come down, so the gain is kept.
func TestHotPathAllocationCeilings(t *testing.T) {
	for _, st := range []string{"memory", "valkey"} {
		t.Run(st, func(t *testing.T) {
			var g *loopbackGate
			if st == "memory" {
				g = newLoopbackGate(t, nil)
			} else {
				g = newLoopbackGateValkey(t)
			}
			for _, c := range hotPathCeilings {
				limit := c.memory
				if st == "valkey" {
					limit = c.valkey
				}
				gatetest.HoldAllocs(t, c.path, st, limit, ceilingSlack, allocRuns, hotPath(g, c.path))
			}
		})
	}
}

// hotPath returns one exchange of the named path on g, after what it
// needs beforehand (the completed record a replay or a 422 answers from).
func hotPath(g *loopbackGate, name string) func() {
	for _, hp := range hotPaths {
		if hp.name == name {
			return hp.setup(g)
		}
	}
	g.tb.Fatalf("no hot path %s", name)
	return nil
}

func benchHotPath(b *testing.B, g *loopbackGate, name string) {
	f := hotPath(g, name)
	for range 20 {
		f()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f()
	}
}

// BenchmarkHotPath runs each hot path, one exchange after the other, on
// the memory store and on Valkey: for CPU profiles by stage
// (docs/performance.md, "Hot path budget").
func BenchmarkHotPath(b *testing.B) {
	for _, st := range []string{"memory", "valkey"} {
		for _, name := range []string{"fresh", "replay", "passthrough"} {
			b.Run(st+"/"+name, func(b *testing.B) {
				var g *loopbackGate
				if st == "memory" {
					g = newLoopbackGate(b, nil)
				} else {
					g = newLoopbackGateValkey(b)
				}
				benchHotPath(b, g, name)
			})
		}
	}
}

// BenchmarkAccessLogToFile is the replay loop on Valkey with the access
// log written to a file, as idemgate writes it to stderr: one write(2) per
// line ("unbuffered", as before internal/logbuf), or through a
// logbuf.Writer as cmd/idemgate wires it ("buffered").
func BenchmarkAccessLogToFile(b *testing.B) {
	for _, buffered := range []bool{false, true} {
		name := "unbuffered"
		if buffered {
			name = "buffered"
		}
		b.Run(name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "access.log"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { f.Close() })
			var out io.Writer = f
			h := fastslog.New(f, nil, true)
			if buffered {
				w := logbuf.New(f, logbuf.DefaultSize, logbuf.DefaultInterval)
				b.Cleanup(func() { w.Close() })
				out = w
				h = logbuf.Handler(fastslog.New(out, nil, true), w, func(r slog.Record) bool { return r.Message == proxy.AccessLogMessage })
			}
			benchHotPath(b, newLoopbackGateValkeyLog(b, slog.New(h)), "replay")
		})
	}
}
