package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// TestV1RecordsFoundAfterRename is a finding of adversarial testing: a
// record written before layout 2 sits under the name of the route that
// governed its request then. After a reload that renames the route, the
// lookup used only the new name and the retry ran again; it now also asks
// the earlier policies of the process (Options.PreviousPolicies).
func TestV1RecordsFoundAfterRename(t *testing.T) {
	up := newUpstream(t, created)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	routeNamed := func(name string) *policy.Policy {
		r := baseRoute()
		r.Name, r.Match = name, "POST /v1/orders"
		p, err := policy.New(baseRoute(), []policy.Route{r})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before, after := routeNamed("orders"), routeNamed("create-order")
	var cur atomic.Pointer[policy.Policy]
	cur.Store(before)
	var previous []*policy.Policy
	target, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, V1Lookup: true,
		Policy: cur.Load, PreviousPolicies: func() []*policy.Policy { return previous }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, up: up, store: st, front: front}

	// A layout 1 record: scoped by the route's name, no recipe.
	req, _ := http.NewRequest("POST", "http://x/v1/orders", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	id := store.Identity{Owner: identity.HeaderOwner("alice"), Scope: "orders", Key: "k2"}
	ctx := context.Background()
	if _, err := st.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: baseRoute().Fingerprint.Of(req, []byte(`{}`)), Token: "t", Lease: time.Second, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Complete(ctx, id, "t", store.Response{Status: 201, Body: []byte("v1-original")}); !ok || err != nil {
		t.Fatal(ok, err)
	}

	cur.Store(after) // the reload renames the route
	previous = []*policy.Policy{before}
	r := h.do("POST", "/v1/orders", "alice", "k2", `{}`)
	if r.status != 201 || r.body != "v1-original" || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry after the rename: %d %q, want the layout 1 record's replay", r.status, r.body)
	}
	if n := up.count("/v1/orders"); n != 0 {
		t.Fatalf("upstream got %d requests, want 0", n)
	}
}
