package proxy_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
)

// The benchmarks of this file put idemgate next to the bench's target B
// (e2e/bench/bareproxy: a bare httputil.ReverseProxy), so that the
// difference per request is idemgate's own work (docs/performance.md,
// "Hot path targets").

// BenchmarkBareReverseProxy is BenchmarkProxyPassthrough's baseline: the
// same request through a bare httputil.ReverseProxy configured as
// e2e/bench/bareproxy, on the same canned upstream.
func BenchmarkBareReverseProxy(b *testing.B) {
	target, _ := url.Parse("http://upstream.invalid")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport:     &cannedUpstream{},
		FlushInterval: -1,
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := &discardWriter{h: http.Header{}}
			rp.ServeHTTP(w, benchRequest("", "user-1"))
			if w.status != http.StatusCreated {
				b.Fatalf("status %d", w.status)
			}
		}
	})
}

// newMeteredBenchProxy is newBenchProxy with the Prometheus metrics on, as
// idemgate serve runs.
func newMeteredBenchProxy(b *testing.B) *proxy.Proxy {
	b.Helper()
	st := memory.New()
	b.Cleanup(func() { st.Close() })
	m, err := metrics.New(prometheus.NewRegistry(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	route := baseRoute()
	route.MaxRequestBytes, route.MaxResponseBytes = 1<<20, 1<<20
	pol, err := policy.New(route, nil)
	if err != nil {
		b.Fatal(err)
	}
	target, _ := url.Parse("http://upstream.invalid")
	p, err := proxy.New(proxy.Options{
		Upstream:  target,
		Store:     metrics.InstrumentStore(st, m),
		Policy:    func() *policy.Policy { return pol },
		Transport: &cannedUpstream{},
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Metrics:   m,
	})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkProxyPassthroughMetered is BenchmarkProxyPassthrough with the
// metrics on.
func BenchmarkProxyPassthroughMetered(b *testing.B) {
	p := newMeteredBenchProxy(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serveBench(b, p, benchRequest("", "user-1"), http.StatusCreated)
		}
	})
}

// BenchmarkProxyFreshMetered is BenchmarkProxyFresh with the metrics on.
func BenchmarkProxyFreshMetered(b *testing.B) {
	p := newMeteredBenchProxy(b)
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

// loopbackUpstream is e2e/bench/upstream in process: it reads the request
// and answers 201 with cannedBody.
func loopbackUpstream(b *testing.B) *httptest.Server {
	b.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(cannedBody)
	}))
	b.Cleanup(up.Close)
	return up
}

// runLoopback sends passthrough POSTs (1 KiB body, no key) to front over
// keep-alive connections from parallel clients; ns/op and allocs/op then
// cover client, proxy and upstream together, all on loopback TCP, as the
// bench's machine does.
func runLoopback(b *testing.B, front string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, front+"/v1/orders", bytes.NewReader(benchBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-User", "user-1")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// BenchmarkLoopbackBare is a passthrough POST through a bare ReverseProxy
// with bareproxy's transport, on real loopback connections.
func BenchmarkLoopbackBare(b *testing.B) {
	up := loopbackUpstream(b)
	target, _ := url.Parse(up.URL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport:     proxy.NewTransport(0),
		FlushInterval: -1,
	}
	front := httptest.NewServer(rp)
	b.Cleanup(front.Close)
	runLoopback(b, front.URL)
}

// BenchmarkLoopbackPassthrough is BenchmarkLoopbackBare through idemgate
// (memory store, metrics and the JSON access log on).
func BenchmarkLoopbackPassthrough(b *testing.B) {
	up := loopbackUpstream(b)
	target, _ := url.Parse(up.URL)
	m, err := metrics.New(prometheus.NewRegistry(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	route := baseRoute()
	pol, err := policy.New(route, nil)
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New()
	b.Cleanup(func() { st.Close() })
	p, err := proxy.New(proxy.Options{
		Upstream: target,
		Store:    st,
		Policy:   func() *policy.Policy { return pol },
		Logger:   slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Metrics:  m,
	})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(p)
	b.Cleanup(front.Close)
	runLoopback(b, front.URL)
}
