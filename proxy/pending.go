package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
)

// CompleteRetryWindow is how long idemgate keeps trying to record a response
// the store refused (it was unreachable), at least a lease and an upstream
// timeout. The response stays in memory meanwhile, one per operation that
// finished during the outage.
const CompleteRetryWindow = 10 * time.Minute

// pendingCompletion is a response this instance received from the upstream
// but could not record yet.
type pendingCompletion struct {
	id    store.Identity
	route string // the route's name, for the log line of its end
	token string
	resp  store.Response
	done  chan struct{} // closed when it ends (endPending)
	// end is how it ended, written under pending.mu before done is
	// closed: read it only once done is.
	end pendingEnd
}

// pendingEnd is how a pending completion ended; each end logs one line
// (endPending), so that every response this instance held can be followed
// to its fate by its key_hash.
type pendingEnd int

const (
	pendingRecorded   pendingEnd = iota // the store holds the response
	pendingNotHeld                      // the record no longer holds the token: nothing recorded
	pendingGivenUp                      // CompleteRetryWindow passed with the store still refusing
	pendingSuperseded                   // a newer claim of this instance replaced it
)

// pending tracks responses waiting to be recorded. It exists for one
// danger: the operation ran, the store was away, and once it is back a
// retry would find a running record past its lease and take it over,
// running the operation a second time. This instance keeps retrying
// Complete in the background and records it before any claim of the same
// identity it serves; storeHealth holds takeovers back meanwhile.
type pending struct {
	mu   sync.Mutex
	byID map[string]*pendingCompletion
	// count mirrors len(byID) so the request path skips the lock (and the
	// key it would build) while nothing is pending, which is nearly always.
	count atomic.Int64
	wg    sync.WaitGroup
}

// recordPending records a response still pending for id before id is
// claimed again on this instance. It returns the store's error when the
// store is still unreachable (the caller fails closed).
func (p *Proxy) recordPending(ctx context.Context, id store.Identity) error {
	if p.pending.count.Load() == 0 {
		return nil
	}
	key := waitKey(id)
	p.pending.mu.Lock()
	pc := p.pending.byID[key]
	p.pending.mu.Unlock()
	if pc == nil {
		return nil
	}
	sctx := p.storeCtx(ctx)
	ok, err := p.store.Complete(sctx, id, pc.token, pc.resp)
	sctx.cancel()
	if err != nil {
		p.noteStoreError()
		return fmt.Errorf("recording a pending response: %w", err)
	}
	end := pendingRecorded
	if !ok {
		end = pendingNotHeld
	}
	p.endPending(key, pc, end, "request", nil)
	return nil
}

// endPending ends pc, the pending completion under key, as end says, and
// logs it; by names who ended it ("retry": completeLater's loop,
// "request": recordPending before a claim), err the store's last error. A
// pending completion ends once: a second end of the same one does nothing.
func (p *Proxy) endPending(key string, pc *pendingCompletion, end pendingEnd, by string, err error) {
	p.pending.mu.Lock()
	current := p.pending.byID[key] == pc
	if current {
		delete(p.pending.byID, key)
		p.pending.count.Add(-1)
		pc.end = end
		close(pc.done)
	}
	p.pending.mu.Unlock()
	if !current {
		return
	}
	p.logPendingEnd(pc, end, by, err)
}

// logPendingEnd writes the one line of a pending completion's end.
func (p *Proxy) logPendingEnd(pc *pendingCompletion, end pendingEnd, by string, err error) {
	attrs := []any{"route", pc.route, "scope", pc.id.Scope, "key_hash", keyHash(pc.id), "by", by}
	switch end {
	case pendingRecorded:
		p.log.Info("recorded a response after a store outage", attrs...)
	case pendingNotHeld:
		p.log.Warn("claim lost before completion; response not recorded", attrs...)
	case pendingGivenUp:
		p.log.Error("could not record the response; a retry after the lease may run the operation again", append(attrs, "err", err)...)
	case pendingSuperseded:
		p.log.Warn("a response waiting to be recorded was dropped: a newer claim of this instance holds the record", attrs...)
	}
}

// completeLater keeps trying to record resp in the background, for up to
// CompleteRetryWindow, with a heartbeat running until it ends, and returns
// the pending completion, whose done is closed when it ends.
func (p *Proxy) completeLater(r *http.Request, ex *exchange, token string, resp store.Response) *pendingCompletion {
	key := waitKey(ex.id)
	// The first answer hands resp's header values to the client's writer
	// (writeStored), which may edit them in place (Caddy's header
	// directive): the response recorded later must be the upstream's.
	resp.Header = resp.Header.Clone()
	pc := &pendingCompletion{id: ex.id, route: ex.route.Name, token: token, resp: resp, done: make(chan struct{})}
	p.pending.mu.Lock()
	if p.pending.byID == nil {
		p.pending.byID = make(map[string]*pendingCompletion)
	}
	old := p.pending.byID[key]
	if old != nil {
		old.end = pendingSuperseded
		close(old.done) // its claim was taken over by this one
	} else {
		p.pending.count.Add(1)
	}
	p.pending.byID[key] = pc
	p.pending.mu.Unlock()
	if old != nil {
		p.logPendingEnd(old, pendingSuperseded, "request", nil)
	}
	// Kept even when Extend finds the record completed: a completion that
	// was not acknowledged may be lost by a failover, which brings back the
	// running record this heartbeat must keep alive.
	stopHeartbeat := p.heartbeatWith(ex, token, true)
	p.pending.wg.Add(1)
	go func() {
		defer p.pending.wg.Done()
		defer stopHeartbeat()
		deadline := time.Now().Add(max(CompleteRetryWindow, ex.route.Lease, p.timeout))
		backoff := 50 * time.Millisecond
		for {
			select {
			case <-pc.done: // ended by recordPending, or superseded
				return
			case <-time.After(backoff):
			}
			ctx := p.storeCtx(r.Context())
			ok, err := p.store.Complete(ctx, ex.id, token, resp)
			ctx.cancel()
			if err == nil {
				end := pendingRecorded
				if !ok {
					end = pendingNotHeld
				}
				p.endPending(key, pc, end, "retry", nil)
				return
			}
			p.noteStoreError()
			if time.Now().After(deadline) {
				p.endPending(key, pc, pendingGivenUp, "retry", err)
				return
			}
			// Short: once the store is back, this write must come before
			// the retries that were refused meanwhile.
			backoff = min(backoff*2, 250*time.Millisecond)
		}
	}()
	return pc
}

// Wait blocks until every response still pending has been recorded (or
// given up), or until ctx ends; call it after http.Server.Shutdown so the
// process does not exit holding responses the store has not seen. It
// returns ctx's error when ctx ends first.
func (p *Proxy) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.pending.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// The process is about to exit with these responses in memory
		// only: one line each, as for every other end.
		p.pending.mu.Lock()
		left := make([]*pendingCompletion, 0, len(p.pending.byID))
		for _, pc := range p.pending.byID {
			left = append(left, pc)
		}
		p.pending.mu.Unlock()
		for _, pc := range left {
			p.log.Error("stopping with a response not recorded; a retry after the lease may run the operation again",
				"route", pc.route, "scope", pc.id.Scope, "key_hash", keyHash(pc.id))
		}
		return fmt.Errorf("proxy: %d responses still waiting to be recorded: %w", len(left), ctx.Err())
	}
}
