package valkey

import (
	"context"

	"github.com/valkey-io/valkey-go"
)

// await runs call and returns its result, or ctx's error as soon as ctx is
// done: valkey-go honours deadlines but may wait out a reconnect (up to
// DialTimeout) before noticing a manual cancel. An abandoned call still ends
// within DialTimeout + ConnTimeout, and its outcome is unknown to the caller,
// which fails closed. A ctx with a deadline is left to valkey-go (direct):
// the proxy's store calls carry only their deadline (proxy's storeCtx
// detaches them from the client).
func await(ctx context.Context, call func() valkey.ValkeyResult) valkey.ValkeyResult {
	if direct(ctx) {
		return call()
	}
	done := make(chan valkey.ValkeyResult, 1)
	go func() { done <- call() }()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		return valkey.NewErrorResult(ctx.Err())
	}
}

// direct reports whether a call under ctx can run on the caller's
// goroutine: ctx never ends, or ends by a deadline, which valkey-go
// enforces itself (a call waiting on another's reconnect ends with that
// dial, within DialTimeout). A goroutine and a channel per call, two
// scheduler hand-offs more, were a store call's price for a deadline it
// did not need them for: every claim and completion of the proxy, 6
// allocations per fresh key.
// The deadline is asked first: a context that arms its timer only when
// Done is called (the proxy's store calls) then arms none.
func direct(ctx context.Context) bool {
	if _, ok := ctx.Deadline(); ok {
		return true
	}
	return ctx.Done() == nil
}

// awaitCall is await for a call whose result is not one ValkeyResult: ok
// is false when ctx ended first (the call's outcome is then unknown).
func awaitCall[T any](ctx context.Context, call func() T) (out T, ok bool) {
	if direct(ctx) {
		return call(), true
	}
	done := make(chan T, 1)
	go func() { done <- call() }()
	select {
	case out = <-done:
		return out, true
	case <-ctx.Done():
		return out, false
	}
}
