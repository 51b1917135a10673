package e2e

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFaultPartitionedHolder: one instance (A) loses Valkey for longer than
// the lease while its upstream call runs; the other (B) stays connected.
// A's heartbeat cannot extend the claim, so on Valkey the claim is past its
// lease and looks abandoned although A is alive. What a retry through B then
// does is the route's on_abandoned (docs/durability.md, "An instance cut off
// from Valkey"):
//
//   - takeover: B takes the claim over and forwards again; the operation
//     runs twice (the window this test documents);
//   - reject: B answers 409 outcome-unknown and forwards nothing; once A
//     reaches Valkey again it records its response, and retries replay it.
//
// The layout5 subtests run both instances on store.valkey.layout 5, whose
// completion after the lease reads the record's expiry and puts back a
// record the token no longer holds (docs/protocol.md, "Layout 5"): A's
// late completion must leave B's takeover record, running or completed,
// as it found it.
func TestFaultPartitionedHolder(t *testing.T) {
	for _, layout := range []string{"", "5"} {
		for _, mode := range []string{"reject", "takeover"} {
			name, extra := mode, ""
			if layout != "" {
				name, extra = "layout"+layout+"/"+mode, "    layout: "+layout+"\n"
			}
			t.Run(name, func(t *testing.T) {
				testPartitionedHolder(t, mode, extra)
			})
		}
	}
}

func testPartitionedHolder(t *testing.T, mode, valkeyExtra string) {
	const key = "partition-1"
	v := valkeytest.Start(t)
	rl := startRelay(t, v.Addr())
	up := startUpstream(t)
	entered := make(chan struct{}, 4)
	// The holder's call outlasts the partition and the retry.
	up.Set(nil, 4*time.Second, entered)
	routes := ordersRoute("lease: 1s", "concurrent: conflict", "on_abandoned: "+mode)
	a := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{rl.Addr()}, ValkeyExtra: valkeyExtra, AdminToken: adminToken, Routes: routes})
	b := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, ValkeyExtra: valkeyExtra, AdminToken: adminToken, Routes: routes})

	first := make(chan Answer, 1)
	go func() { first <- postTimeout(30*time.Second, a.URL+"/v1/orders", "alice", key, `{"n":1}`) }()
	waitEntered(t, entered, 10*time.Second)
	rl.Set(relayReset, 0) // A is cut off from Valkey; B is not
	cut := time.Now()

	// Within a lease B sees the claim running.
	rec := recordURL(b, "orders", "alice", key, "")
	eventually(t, 10*time.Second, "the claim to pass its lease on Valkey", func() bool {
		r := adminDo(t, "GET", rec, adminToken)
		return r.Status == 200 && strings.Contains(string(r.Body), `"state":"abandoned"`)
	})
	t.Logf("claim abandoned on Valkey %v after the cut, while A's call still runs", time.Since(cut).Round(10*time.Millisecond))
	if len(first) != 0 {
		t.Fatalf("A's call ended before the claim was abandoned; the test did not reach the window")
	}
	up.Set(nil, 0, entered)
	retry := postTimeout(30*time.Second, b.URL+"/v1/orders", "alice", key, `{"n":1}`)
	switch mode {
	case "reject":
		if !retry.isProblem(409, "outcome-unknown") {
			t.Fatalf("retry through B during A's partition: %v, want 409 outcome-unknown", retry)
		}
		if n := up.Calls("alice", key); n != 1 {
			t.Fatalf("upstream executed %d times, want 1: on_abandoned: reject must not re-forward", n)
		}
	case "takeover":
		if retry.Status != 201 || retry.replayed() {
			t.Fatalf("retry through B during A's partition: %v, want a forwarded 201 (takeover)", retry)
		}
		if n := up.Calls("alice", key); n != 2 {
			t.Fatalf("upstream executed %d times, want 2: the holder was alive, B took its claim over", n)
		}
	}

	rl.Set(relayPass, 0) // the partition heals
	orig := <-first
	if orig.Status != 201 || orig.replayed() {
		t.Fatalf("A's client: %v, want the upstream's 201", orig)
	}
	// What retries replay from now on: A's response (reject: A records it
	// once it reaches Valkey) or B's (takeover: A's Complete finds the
	// claim lost).
	want := orig.Body
	if mode == "takeover" {
		want = retry.Body
	}
	var last Answer
	eventually(t, 15*time.Second, "a replay through B", func() bool {
		last = postTimeout(10*time.Second, b.URL+"/v1/orders", "alice", key, `{"n":1}`)
		return last.replayed()
	})
	if !bytes.Equal(last.Body, want) {
		t.Fatalf("replay after the partition: %s, want %s", last.Body, want)
	}
	wantCalls := map[string]int{"reject": 1, "takeover": 2}[mode]
	if n := up.Calls("alice", key); n != wantCalls {
		t.Fatalf("upstream executed %d times in the end, want %d", n, wantCalls)
	}
	if mode == "takeover" && !strings.Contains(a.Logs(), "claim lost before completion") {
		t.Errorf("A did not log that its claim was lost")
	}
}
