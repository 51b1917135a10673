package proxy

import (
	"sync/atomic"
	"time"
)

// detailTooManyWaiters explains the 409 answered past the cap.
const detailTooManyWaiters = "a request with this idempotency key is still being processed and this idemgate instance already holds as many waiting requests as it allows; retry after the indicated time"

// waiterSlots counts the requests of one Proxy waiting on running records,
// against its cap. A request takes a slot for each wait and gives it back
// when the wait ends, so the cap bounds the goroutines and connections
// held by waits at any moment, whichever keys they wait for.
type waiterSlots struct {
	max     int64
	n       atomic.Int64
	refused atomic.Int64 // refusals since the last warning
	warned  atomic.Int64 // unix nanoseconds of the last warning
}

// take reports whether a slot was free, and takes it.
func (s *waiterSlots) take() bool {
	if s.n.Add(1) > s.max {
		s.n.Add(-1)
		s.refused.Add(1)
		return false
	}
	return true
}

func (s *waiterSlots) put() { s.n.Add(-1) }

// warnEvery bounds the warning about refused waiters to one line per
// interval: a retry storm would otherwise add a log line per refusal to the
// per-request line it already costs.
const warnEvery = 10 * time.Second

// warnTooManyWaiters notes a duplicate that found every waiter slot taken
// (decideWait answers it request-in-progress at once, with the same
// Retry-After a wait that timed out would give): at most one warning per
// warnEvery with the count.
func (p *Proxy) warnTooManyWaiters() {
	now := time.Now().UnixNano()
	if last := p.slots.warned.Load(); now-last >= int64(warnEvery) && p.slots.warned.CompareAndSwap(last, now) {
		p.log.Warn("duplicates refused: too many requests wait on running calls (server.max_waiters)",
			"max_waiters", p.slots.max, "refused", p.slots.refused.Swap(0))
	}
}
