package e2e

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFaultHolderKilledBeforeRecording: the store goes away while the
// upstream call runs, so the instance holding the claim cannot record the
// response; that instance is then SIGKILLed, the store comes back with the
// claim (AOF), and a retry through a second instance takes the abandoned
// claim over (on_abandoned: takeover) and runs the operation again. That
// second run is the takeover the route chose for an unknown outcome only
// if nobody was told the first run's result: the first client must not
// have been handed a response the store never recorded. It gets 503
// store-unavailable instead, and the retry's 201 is the only result a
// client sees. This is the sequence of TestStormSentinel's duplicates: the
// storm SIGKILLs one instance about three seconds after the failover, while
// completions refused during the cut may still wait for a replica to
// acknowledge them.
func TestFaultHolderKilledBeforeRecording(t *testing.T) {
	v := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	entered := make(chan struct{}, 2)
	up.Set(nil, 300*time.Millisecond, entered)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute("lease: 1s", "on_abandoned: takeover")}
	a, b := startGate(t, c), startGate(t, c)

	first := make(chan Answer, 1)
	go func() { first <- postTimeout(30*time.Second, a.URL+"/v1/orders", "alice", "held", "{}") }()
	waitEntered(t, entered, 5*time.Second)
	v.Kill() // the upstream acts; its response cannot be recorded
	orig := <-first
	a.Kill() // the only copy of the response goes with the process
	v.Restart()
	up.Set(nil, 0, nil)

	var retry Answer
	eventually(t, 30*time.Second, "a final answer to the retry", func() bool {
		retry = postTimeout(15*time.Second, b.URL+"/v1/orders", "alice", "held", "{}")
		return retry.Err == nil && retry.Status != 503 && retry.Status != 409
	})
	n := up.Calls("alice", "held")
	if orig.Status == 201 && n > 1 {
		t.Fatalf("the first client got the first run's result %s, yet the upstream ran %d times (the retry got %v)", orig.Body, n, retry)
	}
	if !orig.isProblem(503, "store-unavailable") || orig.Header.Get("Retry-After") == "" {
		t.Errorf("first answer %v, want 503 store-unavailable with Retry-After", orig)
	}
	if retry.Status != 201 || n != 2 {
		t.Errorf("retry after the holder died: %v with %d upstream runs, want the takeover's 201 (2 runs)", retry, n)
	}
}
