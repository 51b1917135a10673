package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestTombstonesValkey runs tombstones (docs/protocol.md, "Resource index and
// tombstones") on the real binary with
// the Valkey store: a create is replayed, a DELETE the upstream refuses
// changes nothing, a DELETE it accepts turns the create's record into a
// tombstone (a retry gets 410 resource-deleted and the upstream never sees
// it), and another owner's record at the same path still replays.
func TestTombstonesValkey(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	var deleteStatus atomic.Int32
	deleteStatus.Store(http.StatusNotFound)
	var deletes atomic.Int32
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
			w.WriteHeader(int(deleteStatus.Load()))
			return
		}
		w.Header().Set("Location", "/v1/orders/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"owner":%q}`, r.Header.Get("X-User"))
	}, 0, nil)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, Routes: `  - name: orders
    match: "POST /v1/orders"
    retention: 1h
    resource_from: location
`})
	url := g.URL + "/v1/orders"

	create := func(owner string) Answer {
		t.Helper()
		return mustPost(t, url, owner, "create-1", `{"item":"book"}`)
	}
	first := create("alice")
	if first.Status != http.StatusCreated || first.Header.Get("Location") != "/v1/orders/1" || first.replayed() {
		t.Fatalf("create = %d %v %s", first.Status, first.Header, first.Body)
	}
	if bob := create("bob"); bob.Status != http.StatusCreated || bob.replayed() {
		t.Fatalf("bob's create = %d %s", bob.Status, bob.Body)
	}
	if again := create("alice"); again.Status != http.StatusCreated || !again.replayed() || string(again.Body) != string(first.Body) {
		t.Fatalf("replay = %d replayed=%v %s", again.Status, again.replayed(), again.Body)
	}
	if n := up.Calls("alice", "create-1"); n != 1 {
		t.Fatalf("upstream ran alice's create %d times, want 1", n)
	}

	// Refused by the upstream: nothing changes.
	if st := gatetest.DeleteAs(t, g.URL+"/v1/orders/1", "alice"); st != http.StatusNotFound {
		t.Fatalf("refused DELETE = %d, want the upstream's 404", st)
	}
	if again := create("alice"); again.Status != http.StatusCreated || !again.replayed() {
		t.Fatalf("replay after a refused DELETE = %d replayed=%v %s", again.Status, again.replayed(), again.Body)
	}

	deleteStatus.Store(http.StatusNoContent)
	if st := gatetest.DeleteAs(t, g.URL+"/v1/orders/1", "alice"); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d, want 204", st)
	}
	if n := deletes.Load(); n != 2 {
		t.Fatalf("upstream saw %d DELETEs, want 2", n)
	}
	for range 2 {
		gone := create("alice")
		var p struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(gone.Body, &p); err != nil || gone.Status != http.StatusGone || !strings.HasSuffix(p.Type, "resource-deleted") {
			t.Fatalf("retry of the create after DELETE = %d %s (%v), want 410 resource-deleted", gone.Status, gone.Body, err)
		}
	}
	if n := up.Calls("alice", "create-1"); n != 1 {
		t.Fatalf("upstream ran alice's create %d times, want 1", n)
	}
	// Another owner's record at the same path is untouched.
	if bob := create("bob"); bob.Status != http.StatusCreated || !bob.replayed() {
		t.Fatalf("bob's replay after alice's DELETE = %d replayed=%v %s", bob.Status, bob.replayed(), bob.Body)
	}
	if n := up.Calls("bob", "create-1"); n != 1 {
		t.Fatalf("upstream ran bob's create %d times, want 1", n)
	}
}
