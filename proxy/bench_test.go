package proxy_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// benchBody is a 1 KiB JSON request body, as in e2e/bench.
var benchBody = func() []byte {
	head := `{"customer":"cus_42","items":[{"sku":"sku-1","qty":1}],"note":"`
	return []byte(head + strings.Repeat("x", 1024-len(head)-2) + `"}`)
}()

// cannedUpstream answers every request in process with 201 and a ~200-byte
// JSON body after reading the request, so the benchmarks measure the proxy
// and not the network.
type cannedUpstream struct{ calls atomic.Int64 }

var cannedBody = []byte(`{"id":"ord_0000000000000001","status":"created","amount":4200,"currency":"EUR","customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],"created_at":"2025-01-01T00:00:00Z"}`)

func (u *cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	u.calls.Add(1)
	return &http.Response{
		StatusCode:    http.StatusCreated,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/orders/1"}},
		Body:          io.NopCloser(bytes.NewReader(cannedBody)),
		ContentLength: int64(len(cannedBody)),
		Request:       r,
	}, nil
}

// newBenchProxy returns a proxy on the memory store with the production
// JSON logger writing to io.Discard, and its canned upstream.
func newBenchProxy(b *testing.B) (*proxy.Proxy, *cannedUpstream) {
	b.Helper()
	st := memory.New()
	b.Cleanup(func() { st.Close() })
	return newBenchProxyOn(b, st)
}

// newBenchProxyValkey is newBenchProxy on a Valkey store backed by a
// throwaway valkey-server (the benchmark fails when it is not installed),
// writing layout 4 with the replay cache on, as the bench's D and G do.
func newBenchProxyValkey(b *testing.B) (*proxy.Proxy, *cannedUpstream) {
	b.Helper()
	srv := valkeytest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}, Layout: valkey.Layout4, CacheBytes: 32 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return newBenchProxyOn(b, st)
}

func newBenchProxyOn(b *testing.B, st store.Store) (*proxy.Proxy, *cannedUpstream) {
	up := &cannedUpstream{}
	route := baseRoute()
	route.MaxRequestBytes, route.MaxResponseBytes = 1<<20, 1<<20
	pol, err := policy.New(route, nil)
	if err != nil {
		b.Fatal(err)
	}
	target, _ := url.Parse("http://upstream.invalid")
	p, err := proxy.New(proxy.Options{
		Upstream:  target,
		Store:     st,
		Policy:    func() *policy.Policy { return pol },
		Transport: up,
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	return p, up
}

func benchRequest(key, owner string) *http.Request {
	// Not httptest.NewRequest: it parses a serialized request, which would
	// dominate the profile.
	r, _ := http.NewRequest(http.MethodPost, "http://gate/v1/orders", bytes.NewReader(benchBody))
	r.RemoteAddr = "192.0.2.1:1234"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-User", owner)
	if key != "" {
		r.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	return r
}

// discardWriter is a ResponseWriter that keeps only the status, so the
// benchmarks do not count a recorder's buffering.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

func serveBench(b *testing.B, p *proxy.Proxy, r *http.Request, want int) {
	w := &discardWriter{h: http.Header{}}
	p.ServeHTTP(w, r)
	if w.status != want {
		b.Fatalf("status %d, want %d", w.status, want)
	}
}

// BenchmarkProxyFresh measures one enforced request with a new idempotency
// key: parse, fingerprint, claim, forward, complete (memory store).
func BenchmarkProxyFresh(b *testing.B) {
	p, _ := newBenchProxy(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			serveBench(b, p, benchRequest("fresh-"+strconv.FormatInt(i, 10), "user-"+strconv.FormatInt(i%16, 10)), http.StatusCreated)
		}
	})
}

// valkeyParallelism is goroutines per CPU in the Valkey benchmarks: a
// server has many requests waiting on the store at once, which is when
// valkey-go pipelines them.
const valkeyParallelism = 16

// reportProcessCPU reports this process's CPU time (user + system, from
// getrusage) per op from start on as cpu-µs/op: what idemgate in process
// costs beside its handler, Valkey's own CPU left out (its server is
// another process). Unlike ns/op, a machine loaded by other work does not
// inflate it much.
func reportProcessCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU(b)-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// processCPU is this process's CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProxyFreshValkey is BenchmarkProxyFresh on the Valkey store: two
// store round trips (claim, complete) per request.
func BenchmarkProxyFreshValkey(b *testing.B) {
	p, _ := newBenchProxyValkey(b)
	var n atomic.Int64
	b.SetParallelism(valkeyParallelism)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	cpu := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			serveBench(b, p, benchRequest("fresh-"+strconv.FormatInt(i, 10), "user-"+strconv.FormatInt(i%16, 10)), http.StatusCreated)
		}
	})
	reportProcessCPU(b, cpu)
}

// BenchmarkProxyReplayValkey is BenchmarkProxyReplay on the Valkey store:
// one store round trip per request.
func BenchmarkProxyReplayValkey(b *testing.B) {
	p, up := newBenchProxyValkey(b)
	serveBench(b, p, benchRequest("replay", "user-1"), http.StatusCreated)
	b.SetParallelism(valkeyParallelism)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	cpu := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serveBench(b, p, benchRequest("replay", "user-1"), http.StatusCreated)
		}
	})
	reportProcessCPU(b, cpu)
	if c := up.calls.Load(); c != 1 {
		b.Fatalf("upstream called %d times, want 1", c)
	}
}

// BenchmarkProxyReplay measures a retry of a completed key: answered from
// the store, the upstream untouched.
func BenchmarkProxyReplay(b *testing.B) {
	p, up := newBenchProxy(b)
	serveBench(b, p, benchRequest("replay", "user-1"), http.StatusCreated)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serveBench(b, p, benchRequest("replay", "user-1"), http.StatusCreated)
		}
	})
	if c := up.calls.Load(); c != 1 {
		b.Fatalf("upstream called %d times, want 1", c)
	}
}

// BenchmarkProxyPassthrough measures a POST without a key (not enforced),
// which goes through httputil.ReverseProxy.
func BenchmarkProxyPassthrough(b *testing.B) {
	p, _ := newBenchProxy(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serveBench(b, p, benchRequest("", "user-1"), http.StatusCreated)
		}
	})
}
