package awaitonce

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestRunsOnceAfterEndAndLastLeave: the function runs once, whether End
// comes before or after the last Leave, and with calls racing End.
func TestRunsOnceAfterEndAndLastLeave(t *testing.T) {
	var a Await
	var runs atomic.Int32
	a.Enter()
	if a.End(func() { runs.Add(1) }) || runs.Load() != 0 {
		t.Fatal("the function ran while a call was running")
	}
	a.Leave()
	if runs.Load() != 1 || !a.Idle() {
		t.Fatalf("after the last Leave: %d runs, idle %v; want 1 and idle", runs.Load(), a.Idle())
	}

	var b Await
	if !b.End(func() { runs.Add(1) }) || runs.Load() != 2 {
		t.Fatal("End with no call running did not run the function on its goroutine")
	}

	for range 100 {
		var c Await
		var n atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			c.Enter()
			wg.Go(c.Leave)
		}
		c.End(func() { n.Add(1) })
		wg.Wait()
		if n.Load() != 1 {
			t.Fatalf("with calls racing End the function ran %d times, want 1", n.Load())
		}
	}
}
