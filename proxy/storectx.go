package proxy

import (
	"context"
	"sync"
	"time"
)

// storeCall is the context of one store call (Proxy.storeCtx): its
// parent's values without its cancellation, and a deadline. The deadline
// is what the stores act on: valkey-go sets it on the connection of a
// call it sends at once, and the memory, bolt and PostgreSQL stores read
// Err or their driver's deadline. Only a caller that selects on Done (a
// Valkey call queued behind others) needs a timer to close it at the
// deadline, so the timer is started by the first Done, not by every call:
// context.WithTimeout over context.WithoutCancel made four allocations
// and armed a runtime timer per store call, three to four per fresh key.
// Err reports DeadlineExceeded from the deadline itself, so a caller that
// only checks Err sees the call's end as it would with WithTimeout.
type storeCall struct {
	parent   context.Context // for Value only
	deadline time.Time

	mu    sync.Mutex
	done  chan struct{} // made by the first Done
	timer *time.Timer   // closes done at the deadline, once done is made
	err   error
}

// cacheCtx is Proxy.storeCtx for the replay cache's read, the one store
// call of a cached replay: the exchange's first one is held in the
// exchange itself (cacheCall), an allocation less per replay; a later
// round of the claim loop, after a wait, gets one of its own, as a timer
// of the first may still end it.
func (ex *exchange) cacheCtx(parent context.Context, timeout time.Duration) *storeCall {
	deadline := time.Now().Add(timeout)
	if ex.cacheCallUsed {
		return newStoreCall(parent, deadline)
	}
	ex.cacheCallUsed = true
	c := &ex.cacheCall
	c.parent, c.deadline = parent, deadline
	return c
}

// newStoreCall returns the context of a store call under parent's values
// that ends at deadline; its cancel method ends it sooner (Canceled).
func newStoreCall(parent context.Context, deadline time.Time) *storeCall {
	return &storeCall{parent: parent, deadline: deadline}
}

// Deadline is the call's deadline.
func (c *storeCall) Deadline() (time.Time, bool) { return c.deadline, true }

// Value is the parent's: a trace span, a request's identifiers.
func (c *storeCall) Value(key any) any { return c.parent.Value(key) }

// Done is closed when the call is cancelled or its deadline passes; the
// first call makes the channel and arms the timer.
func (c *storeCall) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		switch d := time.Until(c.deadline); {
		case c.err != nil:
			close(c.done)
		case d <= 0:
			c.err = context.DeadlineExceeded
			close(c.done)
		default:
			c.timer = time.AfterFunc(d, c.expire)
		}
	}
	return c.done
}

// Err is Canceled after cancel, DeadlineExceeded once the deadline has
// passed (whether or not Done was asked for), nil before.
func (c *storeCall) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
	return c.err
}

// String names the context as context.WithDeadline's does, for logs.
func (c *storeCall) String() string { return "proxy.storeCall(" + c.deadline.String() + ")" }

func (c *storeCall) expire() { c.end(context.DeadlineExceeded) }

func (c *storeCall) cancel() { c.end(context.Canceled) }

func (c *storeCall) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(err)
	}
}

// endLocked ends the call with err: the timer stopped, Done closed if
// anyone asked for it. c.mu is held and c.err is nil.
func (c *storeCall) endLocked(err error) {
	c.err = err
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.done != nil {
		close(c.done)
	}
}
