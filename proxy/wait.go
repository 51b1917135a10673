package proxy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/store"
)

// wait waits while the record id (the request's own, or a layout 1
// record) is running, up to the route's wait_timeout counted from the first
// wait of this request (ex.waitUntil), and returns what follows
// (decideWait): a claim again, 409 after the timeout or when every waiter
// slot is taken, a store failure, or nothing when the client left. A wait
// that ends on a completed record of ex's own identity hands it to the
// claim that follows, which then needs no round trip: every waiter of a key
// in this process costs one claim and the shared wait, not a second claim
// each after the wake-up (a storm of 10,000 waiters sent 10,000 claims at
// once when it ended; docs/performance.md).
func (p *Proxy) wait(ex *exchange, id store.Identity, retry int) action {
	s := waitState{retry: retry, own: id == ex.id}
	if s.full = !p.slots.take(); s.full {
		p.warnTooManyWaiters()
		return decideWait(s)
	}
	defer p.slots.put()
	if ex.waitUntil.IsZero() {
		ex.waitUntil = time.Now().Add(ex.route.WaitTimeout)
	}
	if s.expired = !time.Now().Before(ex.waitUntil); !s.expired {
		ctx := ex.r.Context()
		s.rec, s.err = p.waitWhileRunning(ctx, id, ex.waitUntil)
		s.clientGone = ctx.Err() != nil
	}
	return decideWait(s)
}

// waitWhileRunning returns once the identity's record is no longer running
// (completed, released, purged, expired, or abandoned: past its lease end),
// waking on the store's notification, at the holder's lease end, and at
// most every store.SafetyPoll. Waiters for one identity in this process
// share one wait, and the record it ended on (nil when the record is gone;
// never running). At limit the holder's lease end decides whether it goes
// on (decideWaitEnd); it returns context.DeadlineExceeded when it does not,
// the store's error, or ctx's error.
func (p *Proxy) waitWhileRunning(ctx context.Context, id store.Identity, limit time.Time) (*store.Record, error) {
	p.m.Waiters(1)
	defer p.m.Waiters(-1)
	until := limit
	for {
		rec, err := p.waitShared(ctx, id, until)
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return rec, err
		}
		if rec, err = p.recordAtWaitEnd(id); err != nil || rec == nil || rec.State != store.Running {
			return rec, err
		}
		until = decideWaitEnd(waitEndState{limit: limit, leaseEnd: rec.LeaseEnd, now: time.Now()})
		if until.IsZero() {
			return nil, context.DeadlineExceeded
		}
	}
}

// waitShared joins (or starts) the shared wait of id and returns what it
// ended on, or context.DeadlineExceeded at until, or ctx's error.
func (p *Proxy) waitShared(ctx context.Context, id store.Identity, until time.Time) (*store.Record, error) {
	for {
		ch := p.waits.DoChan(waitKey(id), func() (any, error) {
			// Detached: one waiter leaving must not end the wait of the others.
			wctx, cancel := context.WithDeadline(context.Background(), until)
			defer cancel()
			return p.pollUntilNotRunning(wctx, id)
		})
		select {
		case res := <-ch:
			if res.Err == nil {
				rec, _ := res.Val.(*store.Record)
				return rec, nil
			}
			// The shared wait may have started with an earlier deadline than ours.
			if errors.Is(res.Err, context.DeadlineExceeded) && time.Now().Before(until) {
				continue
			}
			return nil, res.Err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(until)):
			return nil, context.DeadlineExceeded
		}
	}
}

// recordAtWaitEnd reads id's record for a wait that reached its end.
// Waiters of one identity whose waits end together share the read.
func (p *Proxy) recordAtWaitEnd(id store.Identity) (*store.Record, error) {
	v, err, _ := p.waits.Do("end\x00"+waitKey(id), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), p.storeTimeout)
		defer cancel()
		return p.store.Get(ctx, id)
	})
	rec, _ := v.(*store.Record)
	return rec, err
}

// Bounds of pollDelay.
const (
	// pollPastLease is how long after the holder's lease end the shared
	// wait reads the record again, for a store whose clock is a little
	// behind this instance's.
	pollPastLease = 20 * time.Millisecond
	// minPoll bounds how often a wait reads a record that the store still
	// has running past its lease end by this instance's clock.
	minPoll = 100 * time.Millisecond
)

// pollDelay is how long the shared wait relies on the store's notification
// before it reads the record again: at most store.SafetyPoll, and no later
// than just past the holder's lease end, which no write announces (the
// holder died, or stopped extending): a waiter learns of it then rather than
// up to a SafetyPoll later, when its own wait may have ended (a client that
// retried at once on another instance after the first one died, with
// wait_timeout equal to the lease, got 409 request-in-progress instead of
// the lease-end decision).
func pollDelay(leaseEnd, now time.Time) time.Duration {
	d := leaseEnd.Sub(now) + pollPastLease
	return max(min(d, store.SafetyPoll), minPoll)
}

// pollUntilNotRunning returns the record of id once it is not running (nil
// when absent), ctx's error, or the store's.
func (p *Proxy) pollUntilNotRunning(ctx context.Context, id store.Identity) (*store.Record, error) {
	for {
		changed, stop := p.store.Watch(id)
		gctx, cancel := context.WithTimeout(ctx, p.storeTimeout)
		rec, err := p.store.Get(gctx, id)
		cancel()
		if err != nil {
			stop()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if rec == nil || rec.State != store.Running {
			stop()
			return rec, nil
		}
		t := time.NewTimer(pollDelay(rec.LeaseEnd, time.Now()))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

func waitKey(id store.Identity) string {
	return strconv.Itoa(len(id.Owner)) + ":" + id.Owner + strconv.Itoa(len(id.Scope)) + ":" + id.Scope + id.Key
}
