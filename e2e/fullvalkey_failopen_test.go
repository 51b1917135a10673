package e2e

import (
	"bytes"
	"net/http"
	"testing"
	"time"
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
	v := startFillableValkey(t)
	up := startUpstream(t)
	entered, unblock := holdFirstCall(t, up, "full")
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

// TestFaultValkeyFullFailOpenReplaysCompleted: as
// TestFaultValkeyFullFailOpenKeepsARunningCallOnce, for a call that
// completed before Valkey filled up (the middleware's
// TestValkeyFullNeverRunsACallAgain and the Caddy module's
// TestCaddyValkeyFullNeverRunsACallAgain check both). Its
// retry, on an instance that never saw it (no replay cached: its claim
// reads the record), is replayed, not forwarded unprotected as if the
// store could not be reached; a new key, which needs a write, is
// fail_open's to forward.
func TestFaultValkeyFullFailOpenReplaysCompleted(t *testing.T) {
	v := startFillableValkey(t)
	up := startUpstream(t)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, Routes: ordersRoute("on_store_error: fail_open")}
	a, b := startGate(t, c), startGate(t, c)
	done := mustPost(t, a.URL+"/v1/orders", "alice", "done", "{}")
	if done.Status != 201 || done.replayed() {
		t.Fatalf("before Valkey is full: %v", done)
	}

	free := v.Fill(t)
	defer free()
	retry := postTimeout(15*time.Second, b.URL+"/v1/orders", "alice", "done", "{}")
	if n := up.Calls("alice", "done"); n != 1 {
		t.Fatalf("upstream executed key done %d times: its retry while Valkey was full (answered %v) was forwarded unprotected", n, retry)
	}
	if retry.Status != http.StatusCreated || !retry.replayed() || !bytes.Equal(retry.Body, done.Body) {
		t.Errorf("retry of a completed call with Valkey full: %v, want the replay of %s", retry, done.Body)
	}
	if fresh := postTimeout(15*time.Second, b.URL+"/v1/orders", "alice", "fresh", "{}"); fresh.Status != http.StatusCreated || fresh.replayed() {
		t.Errorf("a new key with Valkey full on a fail_open route: %v, want the upstream's 201", fresh)
	}
}
