package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyTombstones: the Caddy module's shape of e2e TestTombstonesValkey
// (docs/configuration.md, "Tombstones"). A route with resource_from:
// location behind reverse_proxy; the create is replayed, a DELETE of its
// resource (not keyed: it passes through to reverse_proxy) that the
// upstream refuses changes nothing, and one it accepts turns the create's
// record into a tombstone before its answer reaches the client: a retry of
// the create gets 410 resource-deleted, never the deleted order's 201, and
// the upstream never runs it again; another owner's create at the same
// path still replays.
func TestCaddyTombstones(t *testing.T) {
	vk := valkeytest.Start(t)
	var execs atomic.Int64
	var deleteStatus atomic.Int32
	deleteStatus.Store(http.StatusNotFound)
	var mu sync.Mutex
	creates := map[string]int{}
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, r *http.Request, _ int64) {
		mu.Lock()
		creates[r.Header.Get("X-User")]++
		mu.Unlock()
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"owner":%q}`, r.Header.Get("X-User"))
	})
	// CountingUpstream answers every method but POST 200 itself: the
	// DELETEs go to an upstream of their own, on the same path.
	del := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(deleteStatus.Load()))
	}))
	t.Cleanup(del.Close)
	c := runCaddy(t, caddySite{
		YAML:        idemgateYAML + "  retention: 1h\n  resource_from: location\n",
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-tomb:", vk.Addr()),
		After: fmt.Sprintf("@delete method DELETE\n\treverse_proxy @delete %s\n\treverse_proxy %s",
			strings.TrimPrefix(del.URL, "http://"), strings.TrimPrefix(up.URL, "http://")),
	})
	create := func(owner string) answer { t.Helper(); return post(t, c.URL, owner, "create-1", `{"item":"book"}`) }

	first := create("alice")
	if first.Status != http.StatusCreated || first.Header.Get("Location") != "/orders/1" {
		t.Fatalf("create = %d %v %s", first.Status, first.Header, first.Body)
	}
	if bob := create("bob"); bob.Status != http.StatusCreated || bob.replayed() {
		t.Fatalf("bob's create = %d %s", bob.Status, bob.Body)
	}
	if st := gatetest.DeleteAs(t, c.URL+"/orders/1", "alice"); st != http.StatusNotFound {
		t.Fatalf("refused DELETE = %d, want the upstream's 404", st)
	}
	if again := create("alice"); again.Status != http.StatusCreated || !again.replayed() {
		t.Fatalf("replay after a refused DELETE = %d replayed=%v %s", again.Status, again.replayed(), again.Body)
	}
	deleteStatus.Store(http.StatusNoContent)
	if st := gatetest.DeleteAs(t, c.URL+"/orders/1", "alice"); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d, want 204", st)
	}
	if gone := create("alice"); gone.Status != http.StatusGone || !strings.HasSuffix(problemType(gone), "resource-deleted") {
		t.Errorf("retry of the create after its resource was deleted = %d replayed=%v %s, want 410 resource-deleted", gone.Status, gone.replayed(), gone.Body)
	}
	if bob := create("bob"); bob.Status != http.StatusCreated || !bob.replayed() {
		t.Errorf("bob's replay after alice's DELETE = %d %s", bob.Status, bob.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if creates["alice"] != 1 || creates["bob"] != 1 {
		t.Fatalf("the upstream ran the creates %v, want once each", creates)
	}
}

// TestCaddyTombstoneFollowsWhatCaddyAnswers: a DELETE that passes through
// to a handler that returns an error (reverse_proxy that cannot dial) is
// answered by Caddy, 502 here, and tombstones nothing: the create still
// replays. One that no handler answers gets Caddy's empty 200, the
// implicit 200 of net/http, and tombstones: the retry of the create gets
// 410 resource-deleted, never the deleted order's 201.
func TestCaddyTombstoneFollowsWhatCaddyAnswers(t *testing.T) {
	vk := valkeytest.Start(t)
	var execs atomic.Int64
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, r *http.Request, _ int64) {
		order := "1"
		if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), `"order":"2"`) {
			order = "2"
		}
		w.Header().Set("Location", "/orders/"+order)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":1}`)
	})
	c := runCaddy(t, caddySite{
		YAML:        idemgateYAML + "  retention: 1h\n  resource_from: location\n",
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-tomb-answer:", vk.Addr()),
		// Nothing listens on the refused DELETE's upstream: reverse_proxy
		// returns its dial error, and Caddy answers 502.
		After: fmt.Sprintf("@refused path /orders/1\n\treverse_proxy @refused 127.0.0.1:%d\n\t@post method POST\n\treverse_proxy @post %s",
			valkeytest.FreePort(t), strings.TrimPrefix(up.URL, "http://")),
	})
	create := func(order string) answer {
		t.Helper()
		return post(t, c.URL, "alice", "create-"+order, `{"order":"`+order+`"}`)
	}
	for _, order := range []string{"1", "2"} {
		if a := create(order); a.Status != http.StatusCreated || a.replayed() {
			t.Fatalf("create of order %s = %d %s", order, a.Status, a.Body)
		}
	}
	if st := gatetest.DeleteAs(t, c.URL+"/orders/1", "alice"); st != http.StatusBadGateway {
		t.Fatalf("DELETE of order 1 = %d, want Caddy's 502 for reverse_proxy's dial error", st)
	}
	if a := create("1"); a.Status != http.StatusCreated || !a.replayed() {
		t.Errorf("retry of create 1 after a DELETE Caddy answered 502 = %d replayed=%v %s, want its replay", a.Status, a.replayed(), a.Body)
	}
	if st := gatetest.DeleteAs(t, c.URL+"/orders/2", "alice"); st != http.StatusOK {
		t.Fatalf("DELETE of order 2 = %d, want Caddy's empty 200 (no handler answered)", st)
	}
	if gone := create("2"); gone.Status != http.StatusGone || !strings.HasSuffix(problemType(gone), "resource-deleted") {
		t.Errorf("retry of create 2 after Caddy's implicit 200 to its DELETE = %d replayed=%v %s, want 410 resource-deleted", gone.Status, gone.replayed(), gone.Body)
	}
	if n := execs.Load(); n != 2 {
		t.Fatalf("the upstream ran %d creates, want 2", n)
	}
}
