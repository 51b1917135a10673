package proxy

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// detailOverloaded explains the 503 answered past the admission bound.
const detailOverloaded = "this idemgate instance already has as many requests waiting for its idempotency store as it admits, so the request was refused at once: nothing was claimed or forwarded; retry after the indicated time with the same key"

// storeAdmission bounds the keyed requests of one Proxy that wait for a
// store answer at once (server.max_store_waiting). Past capacity the
// store's queue (pgxpool's acquire, valkey-go's ring, bolt's write lock)
// would hold each request, with its goroutine, its connection and a slot
// of that queue, until the store timeout and then answer 503 anyway; the
// bound refuses it at once instead, before it is claimed.
//
// Only admission is bounded: the first claim of a request (with the
// pending completion, replay cache read and layout 1 lookup that go with
// it). A request already admitted that claims again after a wait is
// counted but never refused, and completions, lease extensions and
// releases are neither: refusing them would lose a response or a claim
// that is already held.
//
// A non-blocking counting semaphore of two atomic adds, no allocation and
// no lock on the path of every keyed request.
type storeAdmission struct {
	max     int64
	n       atomic.Int64
	refused atomic.Int64 // refusals since the last warning
	warned  atomic.Int64 // unix nanoseconds of the last warning
}

// admit counts one more request waiting for the store. A new request
// (first) is refused, and not counted, when max are waiting already; a
// request admitted before always is.
func (a *storeAdmission) admit(first bool) bool {
	if n := a.n.Add(1); first && n > a.max {
		a.n.Add(-1)
		a.refused.Add(1)
		return false
	}
	return true
}

// leave ends one admitted request's wait for the store.
func (a *storeAdmission) leave() { a.n.Add(-1) }

// StoreWaiting returns how many keyed requests wait for a store answer
// now, the figure server.max_store_waiting bounds (idemgate_store_waiting
// exports the same).
func (p *Proxy) StoreWaiting() int { return int(p.admission.n.Load()) }

// enterStore admits r to the store on the first round of its claim loop
// (first), or counts it on a later one. When r is refused it answers 503
// overloaded with Retry-After: 1 at once, and enterStore returns false:
// nothing was claimed, and a retry with the same key is safe. At most one
// warning per warnEvery gives the number refused.
func (p *Proxy) enterStore(w http.ResponseWriter, ex *exchange, first bool) bool {
	if p.admission.admit(first) {
		p.m.StoreWaiting(1)
		return true
	}
	p.m.StoreAdmissionRejected()
	now := time.Now().UnixNano()
	if last := p.admission.warned.Load(); now-last >= int64(warnEvery) && p.admission.warned.CompareAndSwap(last, now) {
		p.log.Warn("keyed requests refused: too many wait for the store (server.max_store_waiting)",
			"max_store_waiting", p.admission.max, "refused", p.admission.refused.Swap(0))
	}
	p.fail(w, ex, withRetry(problem.Overloaded.With(detailOverloaded), 1))
	return false
}

// leaveStore ends the wait enterStore admitted.
func (p *Proxy) leaveStore() {
	p.admission.leave()
	p.m.StoreWaiting(-1)
}
