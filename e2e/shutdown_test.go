package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestShutdownGracefullyFinishesAndRecords: SIGTERM while an enforced
// request runs upstream. idemgate stops accepting connections, lets the
// request finish and record, answers it, and exits; a new instance on the
// same Valkey replays the response without a second upstream call.
func TestShutdownGracefullyFinishesAndRecords(t *testing.T) {
	v, up, g := onValkey(t, gateConfig{})
	entered := make(chan struct{}, 1)
	up.Set(nil, time.Second, entered)
	done := make(chan Answer, 1)
	go func() { done <- post(context.Background(), g.URL+"/v1/orders", "alice", "term", `{"n":1}`) }()
	<-entered

	stopped := make(chan struct{})
	go func() { g.Stop(); close(stopped) }()
	// New connections are refused while the request in flight finishes.
	// A dial, not a request: a request accepted in the instant before the
	// listener closed is proxied to the upstream, which holds every call
	// for 1 s and sends each on entered, whose one slot the second such
	// probe would wait on for good (the cause TestShutdownDrainsSlowCall's
	// probe had).
	eventually(t, 5*time.Second, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", g.addr(), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	first := <-done
	if first.Err != nil || first.Status != 201 {
		t.Fatalf("request in flight at SIGTERM: %v %d, want 201", first.Err, first.Status)
	}
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("idemgate did not exit after SIGTERM")
	}
	g.mu.Lock()
	state := g.cmd.ProcessState
	g.mu.Unlock()
	if state == nil || state.ExitCode() != 0 {
		t.Fatalf("exit state %v, want 0:\n%s", state, g.Logs())
	}

	up.Set(nil, 0, nil)
	g2 := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}})
	again := mustPost(t, g2.URL+"/v1/orders", "alice", "term", `{"n":1}`)
	if again.Status != 201 || !again.replayed() || string(again.Body) != string(first.Body) {
		t.Fatalf("after restart: %d replayed=%v, want the recorded response", again.Status, again.replayed())
	}
	if n := up.Calls("alice", "term"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestShutdownRecordsAPendingResponse: the binary's shape of the Caddy
// module's TestCaddyStopRecordsAPendingResponse. Valkey goes away (kept on
// disk) while the upstream acts, so the reject route's client gets the
// response with its completion still to record; idemgate is then sent
// SIGTERM and Valkey comes back while it drains. idemgate records the
// response before it exits, and the retry to a new instance is the
// replay, not outcome-unknown for a call whose client had its answer.
func TestShutdownRecordsAPendingResponse(t *testing.T) {
	v := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	entered, unblock := holdFirstCall(t, up, "pending")
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}})
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(30*time.Second, g.URL+"/v1/orders", "alice", "pending", "{}") }()
	waitEntered(t, entered, 10*time.Second)
	v.Kill() // the upstream acts; its response cannot be recorded
	unblock()
	orig := <-first
	if orig.Status != 201 || orig.replayed() {
		t.Fatalf("first with the store gone: %v, want the upstream's 201", orig)
	}

	stopped := make(chan struct{})
	go func() { g.Stop(); close(stopped) }()
	eventually(t, 10*time.Second, "idemgate draining", func() bool {
		return strings.Contains(g.Logs(), "waiting for requests in flight")
	})
	v.Restart()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatalf("idemgate did not exit once Valkey was back:\n%s", g.Logs())
	}
	if !strings.Contains(g.Logs(), "recorded a response after a store outage") {
		t.Errorf("idemgate exited without recording the pending response:\n%s", g.Logs())
	}

	g2 := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}})
	again := mustPost(t, g2.URL+"/v1/orders", "alice", "pending", "{}")
	if again.Status != 201 || !again.replayed() || string(again.Body) != string(orig.Body) {
		t.Fatalf("retry after the restart: %v, want the replay of %s", again, orig.Body)
	}
	if n := up.Calls("alice", "pending"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}
