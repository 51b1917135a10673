package proxy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// bigBodySize is the request and response body size of docs/performance.md,
// "1 MiB request and response bodies": 1 MiB,
// exactly the default max_request_bytes and max_response_bytes.
const bigBodySize = 1 << 20

// bigJSON returns a JSON document of exactly n bytes holding base64 of
// random bytes, as an uploaded file travels: zstd saves about a quarter of
// it, so the store keeps it compressed.
func bigJSON(n int, seed uint64) []byte {
	const head, tail = `{"file":"`, `"}`
	raw := make([]byte, base64.StdEncoding.DecodedLen(n-len(head)-len(tail)))
	rng := rand.New(rand.NewPCG(seed, 17))
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	b := append([]byte(head), base64.StdEncoding.EncodeToString(raw)...)
	for len(b) < n-len(tail) {
		b = append(b, 'A')
	}
	return append(b[:n-len(tail)], tail...)
}

// newBigBodyProxy returns a proxy on st in front of a real loopback
// upstream that reads the whole request and answers 201 with a 1 MiB body,
// with the default body limits (1 MiB each way).
func newBigBodyProxy(b *testing.B, st store.Store) (*proxy.Proxy, *atomic.Int64) {
	b.Helper()
	resp := bigJSON(bigBodySize, 2)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if n, err := io.Copy(io.Discard, r.Body); err != nil || n != bigBodySize {
			http.Error(w, "short body", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	}))
	b.Cleanup(up.Close)
	route := baseRoute()
	def := policy.DefaultRoute()
	route.MaxRequestBytes, route.MaxResponseBytes = def.MaxRequestBytes, def.MaxResponseBytes
	pol, err := policy.New(route, nil)
	if err != nil {
		b.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{
		Upstream: target,
		Store:    st,
		Policy:   func() *policy.Policy { return pol },
		Logger:   slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	return p, &calls
}

// benchBigBody sends fresh keys with a 1 MiB body and reports, besides
// B/op, "body-copies": bytes allocated per request over the 2 MiB that go
// through the proxy (request and response body), so a copy of either body
// shows as about 0.5 more.
func benchBigBody(b *testing.B, st store.Store) {
	p, calls := newBigBodyProxy(b, st)
	body := bigJSON(bigBodySize, 1)
	var n atomic.Int64
	b.SetBytes(2 * bigBodySize)
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			r, _ := http.NewRequest(http.MethodPost, "http://gate/v1/files", bytes.NewReader(body))
			r.RemoteAddr = "192.0.2.1:1234"
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-User", "user-"+strconv.FormatInt(i%16, 10))
			r.Header.Set("Idempotency-Key", `"big-`+strconv.FormatInt(i, 10)+`"`)
			serveBench(b, p, r, http.StatusCreated)
		}
	})
	runtime.ReadMemStats(&after)
	if c := calls.Load(); c != n.Load() {
		b.Fatalf("upstream called %d times for %d requests", c, n.Load())
	}
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n.Load())/(2*bigBodySize), "body-copies")
}

// BenchmarkProxyBigBody: 1 MiB request and response bodies, memory store
// (which keeps its own copy of every stored body).
func BenchmarkProxyBigBody(b *testing.B) {
	st := memory.New()
	b.Cleanup(func() { st.Close() })
	benchBigBody(b, st)
}

// BenchmarkProxyBigBodyValkey is BenchmarkProxyBigBody on the Valkey store
// (a throwaway valkey-server): the body is compressed and encoded into the
// record on its way to the server.
func BenchmarkProxyBigBodyValkey(b *testing.B) {
	srv := valkeytest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	benchBigBody(b, st)
}
