package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFaultValkeyFullFailOpenKeepsARunningCallOnce: on a route with
// on_store_error: fail_open, Valkey fills up (maxmemory-policy
// noeviction) while a keyed call runs. A duplicate of that call is not a
// store outage: Valkey still answers, and its record says the call is
// running (claim.lua answers that without a write). The duplicate must
// not be forwarded unprotected; it is answered as a duplicate of a running
// call is (here 409, concurrent: conflict). Before, the -OOM refusal of
// claim.lua reached the proxy as a store failure and fail_open sent the
// duplicate to the upstream: the operation ran twice.
func TestFaultValkeyFullFailOpenKeepsARunningCallOnce(t *testing.T) {
	v := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	up := startUpstream(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	entered := make(chan struct{}, 32)
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		owner, key := r.Header.Get("X-User"), r.Header.Get("Idempotency-Key")
		n := up.Calls(owner, key)
		if key == "full" && n == 1 {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"call":%d}`, key, n)
	}, 0, entered)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute("lease: 30s", "concurrent: conflict", "on_store_error: fail_open")})

	first := make(chan Answer, 1)
	go func() { first <- postTimeout(60*time.Second, g.URL+"/v1/orders", "alice", "full", "{}") }()
	waitEntered(t, entered, 10*time.Second)

	free := v.Fill(t)
	defer free()
	dup := postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "full", "{}")
	if n := up.Calls("alice", "full"); n != 1 {
		t.Fatalf("upstream executed key full %d times: the duplicate sent while Valkey was full (answered %v) was forwarded unprotected", n, dup)
	}
	if dup.Status != http.StatusConflict {
		t.Errorf("duplicate of a running call with Valkey full: %v, want 409 as with memory", dup)
	}
	unblock()
	if orig := <-first; orig.Status != 201 {
		t.Fatalf("the original request: %v", orig)
	}
}
