package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// ordersAPI creates orders (201, Location /v1/orders/N) and deletes them
// (204), or answers a DELETE with deleteStatus when it is set.
type ordersAPI struct {
	next         atomic.Int64
	mu           sync.Mutex
	deleteStatus int
}

func (a *ordersAPI) serve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		n := a.next.Add(1)
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, n)
	case http.MethodDelete:
		a.mu.Lock()
		st := a.deleteStatus
		a.mu.Unlock()
		if st == 0 {
			st = http.StatusNoContent
		}
		w.WriteHeader(st)
	}
}

func resourceFrom(o *proxy.Options, d *policy.Route, routes *[]policy.Route) {
	d.ResourceFrom = policy.ResourceFromLocation
	d.TombstoneMethods = []string{http.MethodDelete}
}

// TestTombstoneAfterDelete: create, replay, a refused DELETE (404, 503)
// changes nothing, a DELETE answered 204 (passing through: not keyed)
// makes the retry 410 resource-deleted, whatever its body, while another
// owner's create of the same path still replays.
func TestTombstoneAfterDelete(t *testing.T) {
	api := &ordersAPI{}
	h := newHarness(t, api.serve, resourceFrom)
	first := h.do("POST", "/v1/orders", "alice", "k1", `{"sku":"a"}`)
	if first.status != http.StatusCreated || first.header.Get("Location") != "/v1/orders/1" {
		t.Fatalf("create = %d %v", first.status, first.header)
	}
	// Bob's create is answered with the same Location (ids per tenant),
	// so his record is indexed at the same path, under his owner.
	api.next.Store(0)
	bob := h.do("POST", "/v1/orders", "bob", "k1", `{"sku":"a"}`)
	if bob.status != http.StatusCreated || bob.header.Get("Location") != "/v1/orders/1" {
		t.Fatalf("bob's create = %d %v", bob.status, bob.header)
	}
	if r := h.do("POST", "/v1/orders", "alice", "k1", `{"sku":"a"}`); r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("replay = %d %v", r.status, r.header)
	}
	for _, refused := range []int{http.StatusNotFound, http.StatusServiceUnavailable} {
		api.mu.Lock()
		api.deleteStatus = refused
		api.mu.Unlock()
		if r := h.do("DELETE", "/v1/orders/1", "alice", "", ""); r.status != refused {
			t.Fatalf("refused DELETE = %d, want %d", r.status, refused)
		}
		if r := h.do("POST", "/v1/orders", "alice", "k1", `{"sku":"a"}`); r.status != http.StatusCreated {
			t.Fatalf("retry after a DELETE answered %d = %d, want the replayed 201", refused, r.status)
		}
	}
	api.mu.Lock()
	api.deleteStatus = 0
	api.mu.Unlock()
	// A non-canonical spelling of the path reaches the same resource.
	if r := h.do("DELETE", "/v1/orders/./1", "alice", "", ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d", r.status)
	}
	for _, body := range []string{`{"sku":"a"}`, `{"sku":"other"}`} {
		r := h.do("POST", "/v1/orders", "alice", "k1", body)
		if r.status != http.StatusGone || problemType(t, r) != "resource-deleted" {
			t.Fatalf("retry after the DELETE = %d %s, want 410 resource-deleted", r.status, r.body)
		}
	}
	if got := h.up.count("/v1/orders"); got != 2 {
		t.Fatalf("upstream saw %d creates, want 2 (alice's and bob's)", got)
	}
	if r := h.do("POST", "/v1/orders", "bob", "k1", `{"sku":"a"}`); r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("bob's replay after alice's DELETE = %d %s, want his 201", r.status, r.body)
	}
}

// TestTombstoneByEnforcedDelete: a DELETE that is itself keyed (DELETE in
// methods) tombstones when forwarded, and its replay does it again.
func TestTombstoneByEnforcedDelete(t *testing.T) {
	api := &ordersAPI{}
	h := newHarness(t, api.serve, resourceFrom, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.Methods = []string{"POST", "DELETE"}
	})
	if r := h.do("POST", "/v1/orders", "alice", "c1", `{}`); r.status != http.StatusCreated {
		t.Fatalf("create = %d", r.status)
	}
	if r := h.do("DELETE", "/v1/orders/1", "alice", "d1", ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d", r.status)
	}
	if r := h.do("DELETE", "/v1/orders/1", "alice", "d1", ""); r.status != http.StatusNoContent || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("DELETE replay = %d %v", r.status, r.header)
	}
	r := h.do("POST", "/v1/orders", "alice", "c1", `{}`)
	if r.status != http.StatusGone || !strings.Contains(r.body, "resource-deleted") {
		t.Fatalf("retry = %d %s", r.status, r.body)
	}
}

// TestTombstoneOwnerIsWhatTheUpstreamGets: a DELETE whose owner field is
// named in its Connection field reaches the upstream without it (a
// hop-by-hop field), so the upstream acted for no owner: it tombstones
// nothing of the owner idemgate would have read from that field, as the
// enforced path never takes an owner from it either. (Before: the
// tombstone rules read the request as received, and the DELETE ended the
// replay of alice's create.)
func TestTombstoneOwnerIsWhatTheUpstreamGets(t *testing.T) {
	api := &ordersAPI{}
	var sawUser []string
	var mu sync.Mutex
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			mu.Lock()
			sawUser = append(sawUser, r.Header.Get("X-User"))
			mu.Unlock()
		}
		api.serve(w, r)
	}, resourceFrom)
	if r := h.do("POST", "/v1/orders", "alice", "k1", `{"sku":"a"}`); r.status != http.StatusCreated || r.header.Get("Location") != "/v1/orders/1" {
		t.Fatalf("create = %d %v", r.status, r.header)
	}
	if r := h.do("DELETE", "/v1/orders/1", "alice", "", "", "Connection", "X-User"); r.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", r.status, r.body)
	}
	mu.Lock()
	got := strings.Join(sawUser, ",")
	mu.Unlock()
	if got != "" {
		t.Fatalf("the upstream got X-User %q on the DELETE, want none (named in Connection)", got)
	}
	r := h.do("POST", "/v1/orders", "alice", "k1", `{"sku":"a"}`)
	if r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry after a DELETE the upstream got without an owner = %d %s, want alice's replay", r.status, r.body)
	}
	// The same DELETE with the owner forwarded tombstones it.
	if r := h.do("DELETE", "/v1/orders/1", "alice", "", ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d", r.status)
	}
	if r := h.do("POST", "/v1/orders", "alice", "k1", `{"sku":"a"}`); r.status != http.StatusGone {
		t.Fatalf("retry after alice's DELETE = %d %s, want 410", r.status, r.body)
	}
}
