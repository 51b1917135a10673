package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
)

// stalledStore holds every Claim until release is closed (or the call's
// context ends), as a store slower than the traffic does; it counts the
// claims that reached it.
type stalledStore struct {
	store.Store
	release <-chan struct{}
	claims  atomic.Int64
}

func (s *stalledStore) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if isOwnerRecord(p.Identity) {
		return s.Store.Claim(ctx, p)
	}
	s.claims.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return store.ClaimResult{}, ctx.Err()
	}
	return s.Store.Claim(ctx, p)
}

// counterValue returns the value of the unlabelled counter name, or the
// sum of its series whose labels include want.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestStoreAdmissionRefusesAtOnce: with server.max_store_waiting 3 and a
// store that holds every claim, three keyed requests wait for it and the
// next ones get 503 overloaded with Retry-After: 1 at once (well inside
// the 10 s store timeout), reach neither the store nor the upstream, and
// are counted; a request that is not enforced passes meanwhile; once the
// store answers, the admitted ones are forwarded, the waiting count
// returns to 0, and a refused key is new: its retry is forwarded.
func TestStoreAdmissionRefusesAtOnce(t *testing.T) {
	const admitted, extra = 3, 4
	reg, m := testMetrics(t)
	release, unblock := releaser(t)
	var st *stalledStore
	h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
		st = &stalledStore{Store: o.Store, release: release}
		o.Store, o.Metrics, o.MaxStoreWaiting, o.StoreTimeout = st, m, admitted, 10*time.Second
	})

	first := make(chan result, admitted)
	for i := range admitted {
		go func() { first <- h.do("POST", "/v1/orders", "alice", fmt.Sprintf("admitted-%d", i), "{}") }()
	}
	gatetest.Eventually(t, 5*time.Second, "the admitted claims in the store", func() bool { return st.claims.Load() == admitted })
	if g := gauge(t, reg, "idemgate_store_waiting"); g != admitted {
		t.Fatalf("idemgate_store_waiting = %v, want %d", g, admitted)
	}

	for i := range extra {
		start := time.Now()
		r := h.do("POST", "/v1/orders", "alice", fmt.Sprintf("refused-%d", i), "{}")
		took := time.Since(start)
		if r.status != http.StatusServiceUnavailable || problemType(t, r) != "overloaded" || r.header.Get("Retry-After") != "1" {
			t.Fatalf("request past the bound: %d %v %s, want 503 overloaded with Retry-After: 1", r.status, r.header, r.body)
		}
		if took > time.Second {
			t.Errorf("request past the bound answered after %v, want at once (the store timeout is 10 s)", took)
		}
		t.Logf("refused after %v", took)
	}
	if got := st.claims.Load(); got != admitted {
		t.Errorf("%d claims reached the store, want %d: a refused request must claim nothing", got, admitted)
	}
	if got := h.up.count("/v1/orders"); got != 0 {
		t.Errorf("upstream saw %d requests while the store held every claim, want 0", got)
	}
	// Not enforced (GET): never waits for the store, never refused.
	if r := h.do("GET", "/v1/orders", "alice", "", ""); r.status != http.StatusCreated {
		t.Errorf("passthrough GET = %d %s, want the upstream's 201", r.status, r.body)
	}
	if got := counterValue(t, reg, "idemgate_store_admission_rejected_total", nil); got != extra {
		t.Errorf("idemgate_store_admission_rejected_total = %v, want %d", got, extra)
	}
	if got := counterValue(t, reg, "idemgate_requests_total", map[string]string{"outcome": "overloaded"}); got != extra {
		t.Errorf(`idemgate_requests_total{outcome="overloaded"} = %v, want %d`, got, extra)
	}

	unblock()
	for range admitted {
		if r := <-first; r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "" {
			t.Errorf("admitted request = %d replayed=%q %s, want the upstream's 201", r.status, r.header.Get(proxy.ReplayedHeader), r.body)
		}
	}
	gatetest.Eventually(t, 5*time.Second, "idemgate_store_waiting back to 0", func() bool { return gauge(t, reg, "idemgate_store_waiting") == 0 })
	// Nothing was claimed for a refused key: its retry is a first request.
	if r := h.do("POST", "/v1/orders", "alice", "refused-0", "{}"); r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "" {
		t.Errorf("retry of a refused key = %d replayed=%q %s, want forwarded", r.status, r.header.Get(proxy.ReplayedHeader), r.body)
	}
	if got := h.up.count("/v1/orders"); got != admitted+1+1 {
		t.Errorf("upstream saw %d requests, want %d (the admitted ones, the GET, the retry)", got, admitted+2)
	}
}
