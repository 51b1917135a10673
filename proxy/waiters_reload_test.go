package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
)

// TestWaitersAcrossARecipeChange: waiters that arrive after a reload
// changed the route's recipe compare the record the wait ended on under
// the record's recipe, as a claim would: the same request is replayed,
// another body gets 422, and the operation runs once.
func TestWaitersAcrossARecipeChange(t *testing.T) {
	reg, m := testMetrics(t)
	release, unblock := releaser(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-release; created(w, r) })
	target, _ := url.Parse(up.URL)
	old := baseRoute()
	old.WaitTimeout = 10 * time.Second
	polOld, err := policy.New(old, nil)
	if err != nil {
		t.Fatal(err)
	}
	nw := old
	nw.Fingerprint.Headers = []string{"Content-Type", "X-Extra"}
	polNew, err := policy.New(nw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if polOld.Defaults().Recipe() == polNew.Defaults().Recipe() {
		t.Fatal("the recipes must differ")
	}
	var cur atomic.Pointer[policy.Policy]
	cur.Store(polOld)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, Metrics: m, Policy: cur.Load})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, up: up, store: st, front: front}
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`) }()
	gatetest.Eventually(t, 5*time.Second, "the first request upstream", func() bool { return up.count("/v1/orders") == 1 })
	cur.Store(polNew)
	same := make(chan result, 2)
	go func() { same <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`) }()
	go func() { same <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`, "X-Extra", "v") }()
	other := make(chan result, 1)
	go func() { other <- h.do("POST", "/v1/orders", "alice", "k", `{"n":2}`) }()
	gatetest.Eventually(t, 5*time.Second, "two waiting", func() bool { return gauge(t, reg, "idemgate_waiters") >= 2 })
	unblock()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first %d", r.status)
	}
	for range 2 {
		if r := <-same; r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" {
			t.Errorf("same request after the reload: %d %s", r.status, r.body)
		}
	}
	if r := <-other; r.status != http.StatusUnprocessableEntity {
		t.Errorf("another body after the reload: %d %s, want 422", r.status, r.body)
	}
	if c := up.count("/v1/orders"); c != 1 {
		t.Fatalf("ran %d times", c)
	}
}
