package proxy

import (
	"context"
	"errors"
	"testing"
	"time"
)

type storeCallKey struct{}

// TestStoreCallEndsAtItsDeadline: a store call's context keeps its
// parent's values but not its cancellation, and ends at its deadline
// whether its caller checks Err or waits on Done (asked before or after
// the deadline), or sooner when cancelled.
func TestStoreCallEndsAtItsDeadline(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), storeCallKey{}, "v"))
	cancelParent()
	call := func(deadline time.Time) (context.Context, func()) {
		c := newStoreCall(parent, deadline)
		return c, c.cancel
	}

	ctx, cancel := call(time.Now().Add(time.Hour))
	if ctx.Value(storeCallKey{}) != "v" || ctx.Err() != nil {
		t.Fatalf("value %v, err %v: want the parent's value and no end from its cancellation", ctx.Value(storeCallKey{}), ctx.Err())
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("deadline %v %v, want in an hour", d, ok)
	}
	done := ctx.Done()
	cancel()
	<-done
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after cancel: %v, want Canceled", ctx.Err())
	}
	cancel() // a second cancel is harmless

	// Err alone sees the deadline.
	ctx, cancel = call(time.Now().Add(-time.Millisecond))
	defer cancel()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("past its deadline: %v, want DeadlineExceeded", ctx.Err())
	}
	<-ctx.Done()

	// Done asked before the deadline is closed by it.
	ctx, cancel = call(time.Now().Add(20 * time.Millisecond))
	defer cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("at its deadline: %v, want DeadlineExceeded", ctx.Err())
	}

	// A derived context ends with it.
	ctx, cancel = call(time.Now().Add(time.Hour))
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done()
	if !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("child after cancel: %v, want Canceled", child.Err())
	}
}
