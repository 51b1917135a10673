package proxy

import (
	"runtime"
	"sync/atomic"
	"time"
)

// WaitersPerProc is the default cap on waiters per GOMAXPROCS
// (DefaultMaxWaiters).
//
// Why 1024 per core: a waiter holds a goroutine (a few KiB of stack) and a
// client connection (net/http's 4 KiB read and write buffers, the request),
// estimated at about 16 KiB (not measured yet), so 1024 per core is ~16 MiB per core, small next to what a
// core of idemgate serves otherwise. The cap matters at the other end of
// the wait: when the running call completes, every waiter claims again at
// once and gets its replay, about 0.1 ms of CPU each (a replay's cost in
// docs/performance.md), so 1024 waiters per core drain in about 0.1 s. A
// larger herd only lengthens that burst and the memory an attacker can pin
// with one slow key; the bench's storm of 1,000 duplicates stays under it
// even on one core.
const WaitersPerProc = 1024

// DefaultMaxWaiters returns the cap on waiters used when none is
// configured: WaitersPerProc per GOMAXPROCS, which Go sets from the CPUs
// the process may use (its cgroup's CPU limit included), so it follows the
// machine or the container.
func DefaultMaxWaiters() int { return WaitersPerProc * runtime.GOMAXPROCS(0) }

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
