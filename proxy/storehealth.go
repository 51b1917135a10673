package proxy

import (
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/policy"
)

// storeHealth is when the store last failed and when it answered again.
// After an outage a retry would find a running record past its lease and
// take it over, while the instance holding its response (this one, see
// pending, or another) has not recorded it yet: once the store answers
// again after a failure this instance saw, takeovers are held back for one
// lease so that the holder gets to record it first. While the store is
// failing, the replay cache is not asked either (cachedReplay).
type storeHealth struct {
	// failing is set (unix nanoseconds) by a store failure and cleared by the
	// next successful claim, which sets recovered.
	failing   atomic.Int64
	recovered atomic.Int64
}

// noteStoreError remembers that the store just failed.
func (p *Proxy) noteStoreError() { p.health.failing.CompareAndSwap(0, time.Now().UnixNano()) }

// NoteStoreFailure tells the proxy that the store may have been
// unreachable although no request of this instance saw it fail (for
// example the Valkey store's events subscription was lost). Until the store
// has answered a claim again and one lease has passed since, this instance
// answers 409 instead of taking over a claim whose lease ended: its holder
// may be alive and about to record its response. The owner records it
// has checked are checked again on their scope's next request: a store
// that lost its data (a Valkey restarted without persistence) lost them
// too, and another instance with another owner source may have written
// its own since (TestOwnerRecordCheckedAgainAfterAStoreDisruption). Safe
// for concurrent use.
func (p *Proxy) NoteStoreFailure() {
	p.noteStoreError()
	p.forgetOwnerRecords()
}

// noteStoreOK remembers that the store answered a claim.
func (p *Proxy) noteStoreOK() {
	if since := p.health.failing.Load(); since != 0 && p.health.failing.CompareAndSwap(since, 0) {
		p.health.recovered.Store(time.Now().UnixNano())
	}
}

// holdTakeover reports whether a takeover on route must wait: the store has
// failed since its last answer, or answered again less than a lease ago, so
// a claim past its lease end may belong to an instance that is alive and
// about to record the response.
func (p *Proxy) holdTakeover(route *policy.Route) bool {
	if p.health.failing.Load() != 0 {
		return true
	}
	last := p.health.recovered.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < route.Lease
}
