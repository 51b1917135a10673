package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// TestDrainStartsNoNewUpstreamCalls pins the shutdown rule: once the
// process drains, a request that would start an upstream call (here a
// waiter whose first attempt released its key) releases its claim and gets
// 503 shutting-down instead, because a call started now could outlive the
// drain budget and be cut with its outcome unknown; replays are still
// served, and nothing reaches the upstream twice.
func TestDrainStartsNoNewUpstreamCalls(t *testing.T) {
	release := make(chan struct{})
	status := http.StatusInternalServerError // not replayable: the first attempt releases its key
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "slow" {
			<-release
			w.WriteHeader(status)
			return
		}
		created(w, r)
	})
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(up.URL)
	pol, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, up: up, store: st, front: front}

	if r := h.do("POST", "/v1/orders", "alice", "done", `{}`); r.status != 201 {
		t.Fatalf("before the drain: %d %s", r.status, r.body)
	}
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "slow", `{}`) }()
	gatetest.Eventually(t, 10*time.Second, "the second call upstream", func() bool { return up.count("/v1/orders") == 2 })
	waiter := make(chan result, 1)
	go func() { waiter <- h.do("POST", "/v1/orders", "alice", "slow", `{}`) }()
	// Whenever the waiter arrives, the record is running until release is
	// closed, so it waits, and claims only after the drain began.
	p.Drain()
	close(release)
	if r := <-first; r.status != http.StatusInternalServerError {
		t.Fatalf("the call running at the drain: %d, want its own answer", r.status)
	}
	r := <-waiter
	if r.status != http.StatusServiceUnavailable || problemType(t, r) != "shutting-down" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("waiter after the drain began: %d %s, want 503 shutting-down", r.status, r.body)
	}
	if n := up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream got %d requests, want 2 (no new call during the drain)", n)
	}
	if rec, _ := st.Get(context.Background(), store.Identity{Owner: identity.HeaderOwner("alice"), Scope: policy.DefaultScope, Key: "slow"}); rec != nil {
		t.Fatalf("the refused request kept its claim: %+v", rec)
	}
	if r := h.do("POST", "/v1/orders", "alice", "done", `{}`); r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("replay during the drain: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/v1/orders", "alice", "", ``); r.status != 201 || !strings.Contains(r.body, "echo") {
		t.Fatalf("passthrough during the drain: %d %s", r.status, r.body)
	}
}
