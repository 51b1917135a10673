package e2e

import (
	"context"
	"net"
	"testing"
	"time"
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
