package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// wait waits while the record id (the request's own, or a layout 1
// record) is running, up to the route's wait_timeout counted from the first
// wait of this request (*until). It reports whether the caller should claim
// again; when it returns false the request has been answered (409 after the
// timeout or when every waiter slot is taken, 503 when the store failed,
// nothing when the client left). A wait that ends on a completed record of
// ex's own identity leaves it in ex.waited, so the claim that follows needs
// no round trip: every waiter of a key in this process then costs one claim
// and the shared wait, not a second claim each after the wake-up (issue
// 17: a storm of 10,000 waiters sent 10,000 claims at once when it ended).
func (p *Proxy) wait(w http.ResponseWriter, r *http.Request, ex *exchange, id store.Identity, retry int, until *time.Time) bool {
	if !p.slots.take() {
		p.fail(w, r, ex, p.tooManyWaiters(retry))
		return false
	}
	defer p.slots.put()
	if until.IsZero() {
		*until = time.Now().Add(ex.route.WaitTimeout)
	}
	if !time.Now().Before(*until) {
		p.fail(w, r, ex, inProgress(retry))
		return false
	}
	rec, err := p.waitWhileRunning(r.Context(), id, *until)
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			p.storeFailed(w, r, ex, "wait", err)
			return false
		}
		if r.Context().Err() != nil {
			ex.outcome, ex.status = metrics.OutcomeConflict, 499
			p.done(r, ex)
			return false
		}
		p.fail(w, r, ex, inProgress(retry))
		return false
	}
	if rec != nil && rec.State == store.Completed && id == ex.id {
		ex.waited = rec
	}
	return true
}

// waitWhileRunning returns once the identity's record is no longer running
// (completed, released, purged or expired), waking on the store's
// notification and at most every store.SafetyPoll. Waiters for one identity
// in this process share one wait, and the record it ended on (nil when the
// record is gone; never running). It returns context.DeadlineExceeded at
// until, the store's error, or ctx's error.
func (p *Proxy) waitWhileRunning(ctx context.Context, id store.Identity, until time.Time) (*store.Record, error) {
	p.m.Waiters(1)
	defer p.m.Waiters(-1)
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
		t := time.NewTimer(store.SafetyPoll)
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
