package proxy

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/metrics"
)

// TestStoreAdmissionBoundsOnlyNewRequests: the bound refuses a new request
// (first round of its claim loop) past max, never a request admitted
// before that claims again after a wait, and every admission given back
// returns the count to 0.
func TestStoreAdmissionBoundsOnlyNewRequests(t *testing.T) {
	a := storeAdmission{max: 2}
	for i := range 2 {
		if !a.admit(true) {
			t.Fatalf("new request %d of 2 was refused, want admitted", i+1)
		}
	}
	if a.admit(true) {
		t.Fatal("a third new request was admitted past max 2")
	}
	if !a.admit(false) {
		t.Fatal("a request claiming again after a wait was refused, want counted")
	}
	if got := a.n.Load(); got != 3 {
		t.Fatalf("waiting = %d, want 3 (the refused one not counted)", got)
	}
	for range 3 {
		a.leave()
	}
	if got := a.n.Load(); got != 0 {
		t.Fatalf("waiting = %d after every admission ended, want 0", got)
	}
	if !a.admit(true) {
		t.Fatal("a new request was refused after the others left")
	}
}

// TestStoreAdmissionAllocatesNothing: admission is on the path of every
// keyed request (hot path allocation ceilings): admitting and leaving,
// gauge included, allocate nothing.
func TestStoreAdmissionAllocatesNothing(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{m: m, admission: storeAdmission{max: 8}}
	w, ex := httptest.NewRecorder(), &exchange{}
	if n := testing.AllocsPerRun(1000, func() {
		if !p.enterStore(w, ex, true) {
			t.Fatal("refused below the bound")
		}
		p.leaveStore()
	}); n != 0 {
		t.Fatalf("admission allocates %v times per request, want 0", n)
	}
}
