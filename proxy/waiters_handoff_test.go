package proxy_test

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestWaitersShareTheRecordUnchanged: many waiters handed the one completed
// record their shared wait read each write it in their own form (decoded
// for a client that does not accept gzip, as stored for one that does,
// with trailers and the expiry field), and none of them changes what the
// others read: run under -race.
func TestWaitersShareTheRecordUnchanged(t *testing.T) {
	const n = 16
	reg, m := testMetrics(t)
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write([]byte(`{"id":1,"name":"created"}`))
	zw.Close()
	gz := zbuf.Bytes()
	release, unblock := releaser(t)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set("Content-Encoding", "gzip")
		hd.Set("ETag", `"v1"`)
		hd.Set("Content-Digest", "sha-256=:x:")
		hd.Add("Set-Cookie", "a=1")
		hd.Add("Set-Cookie", "b=2")
		hd.Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		w.Write(gz)
		hd.Set("X-Checksum", "abc")
	}, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.Metrics = m
		d.WaitTimeout = 10 * time.Second
		d.AdvertiseExpiry = true
	})
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`, "Accept-Encoding", "gzip") }()
	gatetest.Eventually(t, 5*time.Second, "the first request upstream", func() bool { return h.up.count("/v1/orders") == 1 })
	type res struct {
		i int
		r result
	}
	out := make(chan res, n)
	for i := range n {
		go func() {
			ae := "identity"
			if i%2 == 0 {
				ae = "gzip"
			}
			out <- res{i, h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`, "Accept-Encoding", ae)}
		}()
	}
	gatetest.Eventually(t, 5*time.Second, "every duplicate waiting", func() bool { return gauge(t, reg, "idemgate_waiters") == n })
	unblock()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first = %d %s", r.status, r.body)
	}
	for range n {
		x := <-out
		r := x.r
		if r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" {
			t.Errorf("waiter %d: %d %q", x.i, r.status, r.body)
			continue
		}
		if r.header.Get(proxy.ExpiresHeader) == "" {
			t.Errorf("waiter %d: no %s", x.i, proxy.ExpiresHeader)
		}
		if got := r.header.Values("Set-Cookie"); len(got) != 2 {
			t.Errorf("waiter %d: Set-Cookie %q", x.i, got)
		}
		// Go's client decodes gzip itself only when it asked for it by
		// default; with Accept-Encoding set explicitly it does not.
		if x.i%2 == 0 {
			if r.header.Get("Content-Encoding") != "gzip" || r.body != string(gz) || r.header.Get("ETag") != `"v1"` {
				t.Errorf("waiter %d (gzip): CE=%q ETag=%q body %q", x.i, r.header.Get("Content-Encoding"), r.header.Get("ETag"), r.body)
			}
		} else {
			if r.header.Get("Content-Encoding") != "" || r.body != `{"id":1,"name":"created"}` || r.header.Get("ETag") != `W/"v1"` || r.header.Get("Content-Digest") != "" {
				t.Errorf("waiter %d (identity): CE=%q ETag=%q CD=%q body %q", x.i, r.header.Get("Content-Encoding"), r.header.Get("ETag"), r.header.Get("Content-Digest"), r.body)
			}
		}
	}
	// The record itself is still as stored: a later retry of each kind.
	r := h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`, "Accept-Encoding", "gzip")
	if r.header.Get("Content-Encoding") != "gzip" || r.body != string(gz) || r.header.Get("ETag") != `"v1"` || r.header.Get("Content-Digest") == "" {
		t.Errorf("later gzip retry: CE=%q ETag=%q body %q", r.header.Get("Content-Encoding"), r.header.Get("ETag"), r.body)
	}
	if got := h.up.count("/v1/orders"); got != 1 {
		t.Fatalf("upstream saw %d, want 1", got)
	}
}

// TestWaitersOfAReleasedClaimRunOnce: when the running call is released
// (a status that is not replayed), the record the wait ends on is not
// completed, so every waiter claims again and exactly one of them runs.
func TestWaitersOfAReleasedClaimRunOnce(t *testing.T) {
	const n = 12
	reg, m := testMetrics(t)
	release, unblock := releaser(t)
	var mu sync.Mutex
	calls := 0
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		c := calls
		mu.Unlock()
		if c == 1 {
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		created(w, r)
	}, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.Metrics = m
		d.WaitTimeout = 10 * time.Second
	})
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`) }()
	gatetest.Eventually(t, 5*time.Second, "the first request upstream", func() bool { return h.up.count("/v1/orders") == 1 })
	out := make(chan result, n)
	for range n {
		go func() { out <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`) }()
	}
	gatetest.Eventually(t, 5*time.Second, "every duplicate waiting", func() bool { return gauge(t, reg, "idemgate_waiters") == n })
	unblock()
	if r := <-first; r.status != http.StatusServiceUnavailable {
		t.Fatalf("first = %d", r.status)
	}
	fresh, replayed := 0, 0
	for range n {
		r := <-out
		switch {
		case r.status == http.StatusCreated && r.header.Get(proxy.ReplayedHeader) == "true":
			replayed++
		case r.status == http.StatusCreated:
			fresh++
		default:
			t.Errorf("waiter: %d %s", r.status, r.body)
		}
	}
	if fresh != 1 || replayed != n-1 {
		t.Errorf("fresh %d replayed %d, want 1 and %d", fresh, replayed, n-1)
	}
	if got := h.up.count("/v1/orders"); got != 2 {
		t.Fatalf("upstream saw %d, want 2", got)
	}
}
