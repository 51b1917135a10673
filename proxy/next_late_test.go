package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestInProcessLateWriteNeverReachesAnotherRequest: a handler that keeps
// its ResponseWriter after it returns (a goroutine it started writes
// later, which net/http forbids but cannot prevent) must not write into
// another request's response: the engine's writer is not reused, so
// alice's late bytes never land in what bob is answered and stored.
func TestInProcessLateWriteNeverReachesAnotherRequest(t *testing.T) {
	late := make(chan http.ResponseWriter, 1)
	done := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-User") == "alice" {
			w.WriteHeader(201)
			w.Write([]byte("alice-order"))
			late <- w // kept past its return
			return
		}
		// bob's call: alice's goroutine writes now, while bob runs.
		aw := <-late
		aw.Write([]byte("alice-secret"))
		done <- struct{}{}
		w.WriteHeader(201)
		w.Write([]byte("bob-order"))
	})
	h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
		o.Next = handler
	})
	for i := range 30 {
		a := h.do("POST", "/v1/orders", "alice", fmt.Sprintf("a%d", i), "{}")
		if a.status != 201 || a.body != "alice-order" {
			t.Fatalf("alice %d: %d %q", i, a.status, a.body)
		}
		go func() { <-done }()
		b := h.do("POST", "/v1/orders", "bob", fmt.Sprintf("b%d", i), "{}")
		if strings.Contains(b.body, "alice") {
			t.Fatalf("round %d: bob was answered %q: alice's late write reached bob's response", i, b.body)
		}
		if r := h.do("POST", "/v1/orders", "bob", fmt.Sprintf("b%d", i), "{}"); strings.Contains(r.body, "alice") {
			t.Fatalf("round %d: bob's replay %q holds alice's bytes", i, r.body)
		}
	}
}
