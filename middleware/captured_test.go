package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/middleware"
)

// TestCapturedOnlyOnCallsTheEngineDecides: Captured is true for the
// writer of a keyed call (and for a writer that wraps it), whose answer
// the engine decides on, and false for the client's writer of a request
// no route enforces, which is sent as written: what the Caddy module asks
// to know whether an error with nothing written is its to answer.
func TestCapturedOnlyOnCallsTheEngineDecides(t *testing.T) {
	idem := middlewaretest.Engine(t, `
store: {driver: memory}
log: {access: false}
defaults: {owner: "header:X-User"}
routes:
  - name: orders
    match: "POST /v1/orders"
`)
	var mu sync.Mutex
	seen := map[string][2]bool{}
	gate := httptest.NewServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method] = [2]bool{middleware.Captured(w), middleware.Captured(wrapper{w})}
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(gate.Close)
	if a := mustPost(t, gate.URL, "alice", "k-captured", `{}`); a.status != http.StatusCreated {
		t.Fatalf("keyed POST: %d %s", a.status, a.body)
	}
	resp, err := http.Get(gate.URL + "/v1/orders")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if got := seen[http.MethodPost]; got != [2]bool{true, true} {
		t.Errorf("keyed POST: Captured(w), Captured(wrapped w) = %v, want both true", got)
	}
	if got := seen[http.MethodGet]; got != [2]bool{false, false} {
		t.Errorf("GET no route enforces: Captured(w), Captured(wrapped w) = %v, want both false", got)
	}
}

// wrapper is a handler's own writer around the one it was given.
type wrapper struct{ http.ResponseWriter }

func (w wrapper) Unwrap() http.ResponseWriter { return w.ResponseWriter }
