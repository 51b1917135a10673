package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// TestRecordsKeepTheirRecipe pins at the proxy that a reload keeps records
// reachable (TestReloadKeepsRecords on the binary): a record
// is compared by the fingerprint recipe it was claimed with, so after the
// route's fingerprint settings change a completed operation still
// replays, the same key on another request is still 422, and an abandoned
// claim is still taken over (the store alone refuses the takeover, since
// the fingerprints under two recipes differ).
func TestRecordsKeepTheirRecipe(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := memory.New(memory.WithClock(clock))
	t.Cleanup(func() { st.Close() })
	old := baseRoute().Fingerprint // content-type, query, raw
	h := newHarness(t, created, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.Store = st
		d.Fingerprint = fingerprint.Spec{Headers: []string{"Content-Type", "X-Trace"}, Body: fingerprint.BodyJSON}
	})
	fpOld := func(path, body string) string {
		req, _ := http.NewRequest("POST", "http://x"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return old.Of(req, []byte(body))
	}
	id := func(key string) store.Identity {
		return store.Identity{Owner: identity.HeaderOwner("alice"), Scope: policy.DefaultScope, Key: key}
	}
	ctx := context.Background()

	// Completed under the old recipe: replayed, and 422 for another body.
	p := store.ClaimParams{Identity: id("done"), Fingerprint: fpOld("/v1/orders", `{"a":1}`), Recipe: old.Recipe(),
		Token: "t1", Lease: time.Second, Retention: time.Hour}
	if _, err := st.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Complete(ctx, p.Identity, "t1", store.Response{Status: 201, Body: []byte("old answer")}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if r := h.do("POST", "/v1/orders", "alice", "done", `{"a":1}`); r.status != 201 || r.body != "old answer" || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry under new fingerprint settings: %d %q, want the replay", r.status, r.body)
	}
	if r := h.do("POST", "/v1/orders", "alice", "done", `{"a":2}`); r.status != 422 {
		t.Fatalf("key reused with another body: %d %q, want 422", r.status, r.body)
	}

	// Abandoned under the old recipe: taken over, i.e. forwarded once.
	p = store.ClaimParams{Identity: id("dead"), Fingerprint: fpOld("/v1/orders", `{"a":1}`), Recipe: old.Recipe(),
		Token: "t2", Lease: time.Second, Retention: time.Hour}
	if _, err := st.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if r := h.do("POST", "/v1/orders", "alice", "dead", `{"a":1}`); r.status != 201 || r.header.Get(proxy.ReplayedHeader) == "true" {
		t.Fatalf("retry of an abandoned claim of the old recipe: %d %q, want a takeover (forwarded 201)", r.status, r.body)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream got %d requests, want 1 (the takeover)", n)
	}
	if rec, _ := st.Get(ctx, id("dead")); rec == nil || rec.Recipe != old.Recipe() || rec.State != store.Completed {
		t.Fatalf("record after the takeover = %+v, want completed under the recipe it was first claimed with", rec)
	}

	// A recipe this build cannot follow is neither replayed nor run.
	p = store.ClaimParams{Identity: id("future"), Fingerprint: "hs2:x", Recipe: "v=hs2&b=raw", Token: "t3", Lease: time.Second, Retention: time.Hour}
	if _, err := st.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Complete(ctx, p.Identity, "t3", store.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if r := h.do("POST", "/v1/orders", "alice", "future", `{"a":1}`); r.status != 422 {
		t.Fatalf("record of an unknown recipe: %d %q, want 422", r.status, r.body)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream got %d requests, want still 1", n)
	}
}

// TestHostRoutesNeverShareRecords is a finding of adversarial testing:
// with every route in one shared scope, tenant b's order on host b.example
// was answered with tenant a's stored response (same key, owner value and
// body; the fingerprint does not cover the host). Host routes now keep their
// records in a scope of their own.
func TestHostRoutesNeverShareRecords(t *testing.T) {
	h := newHarness(t, created, func(_ *proxy.Options, _ *policy.Route, routes *[]policy.Route) {
		a, b := baseRoute(), baseRoute()
		a.Name, a.Match = "tenant-a", "POST a.example/v1/orders"
		b.Name, b.Match = "tenant-b", "POST b.example/v1/orders"
		*routes = append(*routes, a, b)
	})
	send := func(host string) result { return postToHost(t, h, host, "order-1") }
	if r := send("a.example"); r.status != 201 {
		t.Fatalf("tenant a: %d %s", r.status, r.body)
	}
	if r := send("b.example"); r.status != 201 || r.header.Get(proxy.ReplayedHeader) == "true" {
		t.Fatalf("tenant b got %d replayed=%q: another host's stored response", r.status, r.header.Get(proxy.ReplayedHeader))
	}
	if n := h.up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream got %d requests, want 2 (one per host)", n)
	}
}

// TestRecipeBoundsAgree: the policy refuses a route whose recipe the stores
// would refuse at every claim (store.MaxRecipeBytes, the one bound).
func TestRecipeBoundsAgree(t *testing.T) {
	r := baseRoute()
	for i := range 200 {
		r.Fingerprint.Headers = append(r.Fingerprint.Headers, fmt.Sprintf("x-header-%03d", i))
	}
	if _, err := policy.New(r, nil); err == nil || !strings.Contains(err.Error(), "fingerprint.headers") {
		t.Fatalf("New with a %d-header recipe = %v, want a fingerprint.headers error", len(r.Fingerprint.Headers), err)
	}
}

// TestPassHostScopesRecordsByHost is adversarial finding F1 of the second
// round: with upstream.pass_host the upstream serves each client Host on its
// own, yet a hostless route kept one record for both hosts, and tenant b was
// answered with tenant a's stored response. The request's host now enters
// the key scope when pass_host is on.
func TestPassHostScopesRecordsByHost(t *testing.T) {
	h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) { o.PassHost = true })
	send := func(host string) result { return postToHost(t, h, host, "k1") }
	if r := send("tenant-a.example"); r.status != 201 {
		t.Fatalf("tenant a: %d %s", r.status, r.body)
	}
	if r := send("tenant-b.example"); r.status != 201 || r.header.Get(proxy.ReplayedHeader) == "true" {
		t.Fatalf("tenant b: %d replayed=%q, want its own forwarded 201", r.status, r.header.Get(proxy.ReplayedHeader))
	}
	if r := send("Tenant-A.example"); r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("tenant a again (host in another case): %d, want the replay", r.status)
	}
	if n := h.up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream got %d requests, want 2 (one per host)", n)
	}
}

// postToHost sends POST /v1/orders for owner 42 with key to h's proxy with
// the Host field host.
func postToHost(t *testing.T, h *harness, host, key string) result {
	t.Helper()
	req, err := http.NewRequest("POST", h.front.URL+"/v1/orders", strings.NewReader(`{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", "42")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}
