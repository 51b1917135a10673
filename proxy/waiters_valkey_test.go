package proxy_test

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestWaitersOnValkeyGetTheWholeResponse: on Valkey, two instances (one
// with the replay cache, one without), waiters of large responses (an
// incompressible one, a compressible one stored compressed, a gzip one
// decoded for some) are handed by the record Get read the same response
// a claim replays: body, headers, trailers.
func TestWaitersOnValkeyGetTheWholeResponse(t *testing.T) {
	srv := valkeytest.Start(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "adv4-" + hex.EncodeToString(b) + ":"
	noise := make([]byte, 300<<10)
	_, _ = rand.Read(noise)
	bodies := map[string][]byte{
		"/v1/noise": noise,
		"/v1/text":  []byte(strings.Repeat(`{"line":"the same text again"},`, 10000)),
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(bodies["/v1/text"])
	zw.Close()
	bodies["/v1/gz"] = zb.Bytes()
	release, unblock := releaser(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Trailer", "X-Sum")
		if r.URL.Path == "/v1/gz" {
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.WriteHeader(http.StatusCreated)
		w.Write(bodies[r.URL.Path])
		w.Header().Set("X-Sum", "s-"+r.URL.Path)
	})
	target, _ := url.Parse(up.URL)
	route := baseRoute()
	route.MaxResponseBytes = 4 << 20
	route.WaitTimeout = 20 * time.Second
	// Long enough that a loaded machine (-race, two cores shared with
	// other test binaries) never lets the holder's lease lapse between its
	// heartbeats: a takeover would run a call twice, which is not what
	// this test is about (it once did at load 17, on the code before).
	route.Lease = 15 * time.Second
	pol, err := policy.New(route, nil)
	if err != nil {
		t.Fatal(err)
	}
	regs := []*prometheus.Registry{}
	gate := func(cacheBytes int64) *httptest.Server {
		reg, m := testMetrics(t)
		regs = append(regs, reg)
		return valkeyGate(t, srv.Addr(), prefix, cacheBytes, proxy.Options{Upstream: target, Timeout: 10 * time.Second,
			Metrics: m, Policy: func() *policy.Policy { return pol }})
	}
	fronts := []*httptest.Server{gate(8 << 20), gate(0)}
	do := func(front *httptest.Server, path, ae string) (int, http.Header, []byte, http.Header) {
		req, _ := http.NewRequest("POST", front.URL+path, strings.NewReader(`{"n":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", "k"+path)
		req.Header.Set("Accept-Encoding", ae)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return 0, nil, nil, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body, resp.Trailer
	}
	const n = 6
	type res struct {
		path, ae string
		status   int
		body     []byte
		tr       http.Header
		replayed string
	}
	out := make(chan res, 3*(2*n+1))
	for path := range bodies {
		go func() {
			s, h, body, tr := do(fronts[0], path, "gzip")
			out <- res{path, "gzip", s, body, tr, h.Get(proxy.ReplayedHeader)}
		}()
	}
	gatetest.Eventually(t, 5*time.Second, "three calls upstream", func() bool {
		return up.count("/v1/noise") == 1 && up.count("/v1/text") == 1 && up.count("/v1/gz") == 1
	})
	for path := range bodies {
		for i := range 2 * n {
			ae := "gzip"
			if i%2 == 1 {
				ae = "identity"
			}
			go func() {
				s, h, body, tr := do(fronts[i%2], path, ae)
				out <- res{path, ae, s, body, tr, h.Get(proxy.ReplayedHeader)}
			}()
		}
	}
	gatetest.Eventually(t, 5*time.Second, "every duplicate waiting", func() bool {
		return gauge(t, regs[0], "idemgate_waiters")+gauge(t, regs[1], "idemgate_waiters") == 3*2*n
	})
	unblock()
	for range 3 * (2*n + 1) {
		r := <-out
		want := bodies[r.path]
		if r.path == "/v1/gz" && r.ae == "identity" {
			want = bodies["/v1/text"]
		}
		if r.status != http.StatusCreated || !bytes.Equal(r.body, want) || r.tr.Get("X-Sum") != "s-"+r.path {
			t.Errorf("%s (%s, replayed %q): %d, body %d bytes equal=%v, trailer %q", r.path, r.ae, r.replayed, r.status, len(r.body), bytes.Equal(r.body, want), r.tr)
		}
	}
	for path := range bodies {
		if c := up.count(path); c != 1 {
			t.Errorf("%s ran %d times", path, c)
		}
	}
}
