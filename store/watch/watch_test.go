package watch_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/watch"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(50 * time.Millisecond):
		return false
	}
}

func TestWakeOnlyTheKey(t *testing.T) {
	var s watch.Set[string]
	a1, stopA1 := s.Watch("a")
	a2, _ := s.Watch("a")
	b, stopB := s.Watch("b")
	defer stopB()
	s.Wake("a")
	if !closed(a1) || !closed(a2) {
		t.Fatal("waiters of a not woken")
	}
	if closed(b) {
		t.Fatal("waiter of b woken by a")
	}
	stopA1() // after the wake: harmless
	stopA1()
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1 (only b)", n)
	}
}

func TestStopForgets(t *testing.T) {
	var s watch.Set[int]
	ch, stop := s.Watch(1)
	stop()
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after stop, want 0", n)
	}
	s.Wake(1)
	if closed(ch) {
		t.Fatal("a stopped waiter was woken")
	}
}

func TestWakeAllAndClose(t *testing.T) {
	var s watch.Set[string]
	a, _ := s.Watch("a")
	b, _ := s.Watch("b")
	s.WakeAll()
	if !closed(a) || !closed(b) {
		t.Fatal("WakeAll missed a waiter")
	}
	c, _ := s.Watch("c")
	s.Close()
	if !closed(c) {
		t.Fatal("Close did not wake")
	}
	d, stop := s.Watch("d")
	defer stop()
	if !closed(d) {
		t.Fatal("Watch after Close must return a closed channel")
	}
}
