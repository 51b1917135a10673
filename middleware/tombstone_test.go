package middleware_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestTombstonesInProcess: the middleware's shape of e2e
// TestTombstonesValkey (docs/configuration.md, "Tombstones"). A route with
// resource_from: location; the create is replayed, a DELETE of its
// resource (not keyed: it passes through to the handler) that the handler
// refuses changes nothing, and one it accepts turns the create's record
// into a tombstone before its answer reaches the client: a retry of the
// create gets 410 resource-deleted, never the deleted order's 201, and the
// handler never runs it again; another owner's create at the same path
// still replays.
func TestTombstonesInProcess(t *testing.T) {
	vk := valkeytest.Start(t)
	var mu sync.Mutex
	creates := map[string]int{}
	deleteStatus := http.StatusNotFound
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodDelete {
			w.WriteHeader(deleteStatus)
			return
		}
		creates[r.Header.Get("X-User")]++
		w.Header().Set("Location", "/v1/orders/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"owner":%q}`, r.Header.Get("X-User"))
	})
	gate := serve(t, testConfig(vk.Addr(), "mw-tomb:")+"    retention: 1h\n    resource_from: location\n", h)
	create := func(owner string) answer {
		t.Helper()
		return mustPost(t, gate.URL, owner, "create-1", `{"item":"book"}`)
	}

	first := create("alice")
	if first.status != http.StatusCreated || first.header.Get("Location") != "/v1/orders/1" {
		t.Fatalf("create = %d %v %s", first.status, first.header, first.body)
	}
	if bob := create("bob"); bob.status != http.StatusCreated || bob.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("bob's create = %d %s", bob.status, bob.body)
	}
	if st := gatetest.DeleteAs(t, gate.URL+"/v1/orders/1", "alice"); st != http.StatusNotFound {
		t.Fatalf("refused DELETE = %d, want the handler's 404", st)
	}
	if again := create("alice"); again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after a refused DELETE = %d replayed=%q %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
	mu.Lock()
	deleteStatus = http.StatusNoContent
	mu.Unlock()
	if st := gatetest.DeleteAs(t, gate.URL+"/v1/orders/1", "alice"); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d, want 204", st)
	}
	gone := create("alice")
	if gone.status != http.StatusGone || !strings.Contains(gone.body, "resource-deleted") {
		t.Errorf("retry of the create after its resource was deleted = %d replayed=%q %s, want 410 resource-deleted",
			gone.status, gone.header.Get("Idempotent-Replayed"), gone.body)
	}
	if bob := create("bob"); bob.status != http.StatusCreated || bob.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("bob's replay after alice's DELETE = %d %s", bob.status, bob.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if creates["alice"] != 1 || creates["bob"] != 1 {
		t.Fatalf("the handler ran the creates %v, want once each", creates)
	}
}

// TestTombstoneOnAnImplicit200InProcess: a DELETE handler that succeeds by
// writing nothing (net/http's implicit 200) has deleted the resource as
// much as one that answers 204: a retry of the create gets 410
// resource-deleted, never the deleted order's 201.
func TestTombstoneOnAnImplicit200InProcess(t *testing.T) {
	vk := valkeytest.Start(t)
	var creates atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			return
		}
		creates.Add(1)
		w.Header().Set("Location", "/v1/orders/1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":1}`)
	})
	gate := serve(t, testConfig(vk.Addr(), "mw-tomb200:")+"    retention: 1h\n    resource_from: location\n", h)
	if first := mustPost(t, gate.URL, "alice", "create-1", `{"item":"book"}`); first.status != http.StatusCreated {
		t.Fatalf("create = %d %s", first.status, first.body)
	}
	if st := gatetest.DeleteAs(t, gate.URL+"/v1/orders/1", "alice"); st != http.StatusOK {
		t.Fatalf("DELETE = %d, want net/http's implicit 200", st)
	}
	gone := mustPost(t, gate.URL, "alice", "create-1", `{"item":"book"}`)
	if gone.status != http.StatusGone || !strings.Contains(gone.body, "resource-deleted") || creates.Load() != 1 {
		t.Fatalf("retry of the create after an implicit 200 to its DELETE = %d replayed=%q %s (creates %d), want 410 resource-deleted",
			gone.status, gone.header.Get("Idempotent-Replayed"), gone.body, creates.Load())
	}
}
