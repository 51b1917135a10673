package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"weak"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// ownerRecordLease is the lease of a claim of an owner record: the time
// between its Claim and Complete (two round trips), with room. An
// instance that dies in between holds the record this long at most; one
// of the same source then takes it over.
const ownerRecordLease = 5 * time.Second

// ownerConflict is the error of an owner record that names another owner
// source than the route's (policy.OwnerRecord).
type ownerConflict struct {
	rec      *policy.OwnerRecord
	route    string // the route of the request refused
	recorded string // the source the store's record names
	// unfinished: the record was claimed by an instance that never
	// completed it (it died), so its source is not known to have written
	// records; it still decides nothing until an operator deletes it.
	unfinished bool
}

func (e *ownerConflict) Error() string {
	how := "names"
	if e.unfinished {
		how = "was begun, and never completed, by an instance taking owners from"
	}
	return fmt.Sprintf("route %q takes its owners from %s, but the owner record of key scope %q (owner form %s) in the store %s %s: the scope's records were written with owner values of the same form from that source, so a principal of the new source would be answered another principal's records; every keyed request of the scope is refused until the configuration takes owners from the recorded source again, gives the route a scope of its own, or an operator deletes the owner record on purpose, once the scope holds no records of the old source that a principal of the new one must not get: idemgate admin purge --route %s --owner %s --key %s --force",
		e.route, e.rec.Source, e.rec.Identity.Scope, e.rec.Identity.Key, how, e.recorded,
		e.route, e.rec.Identity.Owner, e.rec.Identity.Key)
}

// ownersChecked reports whether the request of ex may be claimed as far
// as the owner record of its scope goes (policy.OwnerRecord), checking the
// record first when this proxy has not under the request's policy. When
// it may not, the request has been answered: a store failure as a failed
// claim is, a conflict with 500 owner-source-conflict. Once a record is
// checked, a request costs one atomic load here (OwnerRecord.Passed).
func (p *Proxy) ownersChecked(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	rec := ex.route.OwnerRecord()
	if rec == nil || rec.Passed(p) {
		return true
	}
	// The requests of one record share one check, bounded by its own
	// deadline. A client that leaves does not end it, as it ends no
	// store call (storeCtx): its request is forwarded all the same
	// (TestFaultClientGoneAfterSending).
	_, err, _ := p.ownerChecks.Do(fmt.Sprintf("%p", rec), func() (any, error) {
		return nil, p.checkOwnerRecord(rec, ex.route.Name)
	})
	if err == nil {
		return true
	}
	var conflict *ownerConflict
	if errors.As(err, &conflict) {
		ex.cause = err
		p.logOwnerConflict(conflict)
		p.fail(w, ex, problem.OwnerSourceConflict.With(
			"this route's owner source differs from the one recorded for its key scope, so the request was not forwarded; an operator must resolve it (idemgate logs the details)"))
		return false
	}
	op := "claim"
	if errors.Is(err, store.ErrNotAcknowledged) {
		// The store answered, only its replicas lag: a fail_open route's
		// unprotected forward is for a store that cannot say what ran,
		// and would skip this request's own record, which may be
		// completed and its completion not acknowledged yet
		// (TestMiddlewareFailOpenNeverRunsAnUnacknowledgedCompletionAgain).
		// Refused, as a failed claim on a fail_closed route is.
		op = "owner_record"
	}
	p.storeFailed(w, r, ex, op, err)
	return false
}

// logOwnerConflict logs the conflict at error, once per warnEvery per
// scope and form: each refused request of the scope finds it again.
func (p *Proxy) logOwnerConflict(c *ownerConflict) {
	k := c.rec.Identity.Scope + "\x00" + c.rec.Identity.Key
	now := time.Now()
	p.conflictsMu.Lock()
	last, seen := p.conflictsLogged[k]
	due := !seen || now.Sub(last) >= warnEvery
	if due {
		if p.conflictsLogged == nil {
			p.conflictsLogged = map[string]time.Time{}
		}
		p.conflictsLogged[k] = now
	}
	p.conflictsMu.Unlock()
	if due {
		p.log.Error("owner source conflict; keyed requests of the scope refused", "route", c.route,
			"scope", c.rec.Identity.Scope, "owner_source", c.rec.Source, "recorded_owner_source", c.recorded, "err", c)
	}
}

// checkOwnerRecord makes sure the store's owner record of rec's scope and
// owner form names rec's source: it claims the record, and completes it
// (kept forever) when the claim is new; it answers nil when the record is
// rec's, an *ownerConflict when it names another source, and an error
// wrapping store.ErrUnavailable when the store gives no decision in time.
// It never admits without one: a record another instance is writing is
// waited for, one of the same source left unfinished (a crash between
// claim and completion) is taken over once its lease ends, per the
// store's contract.
func (p *Proxy) checkOwnerRecord(rec *policy.OwnerRecord, route string) error {
	p.ownerTokenOnce.Do(func() { p.ownerToken = p.newToken() })
	p.conflictsMu.Lock()
	gen := p.ownersForgotten
	p.conflictsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), ownerRecordLease+3*p.storeTimeout)
	defer cancel()
	for {
		// Watch before the claim whose Running answer is waited on.
		changed, stop := p.store.Watch(rec.Identity)
		res, err := p.ownerClaim(ctx, rec)
		if err != nil {
			stop()
			return err
		}
		switch res.State {
		case store.Claimed:
			stop()
			sctx, scancel := context.WithTimeout(ctx, p.storeTimeout)
			done, err := p.store.Complete(sctx, rec.Identity, p.ownerToken, rec.Response())
			scancel()
			if err != nil {
				// Retried with the same token by the next request's
				// check (contract rules 1 and 3).
				return fmt.Errorf("completing the owner record: %w", err)
			}
			if done {
				p.passOwnerRecord(rec, gen)
				p.log.Info("owner record written", "scope", rec.Identity.Scope, "owner_form", rec.Identity.Key, "owner_source", rec.Source)
				return nil
			}
			// Taken over past our lease: claim again and read whose it is.
			continue
		case store.Completed:
			stop()
			if res.Fingerprint == rec.Fingerprint {
				p.passOwnerRecord(rec, gen)
				return nil
			}
			return &ownerConflict{rec: rec, route: route, recorded: policy.RecordedSource(res.Recipe)}
		case store.Abandoned:
			// Another source's claim, past its lease: never taken over
			// (another fingerprint), and never admitted either.
			stop()
			return &ownerConflict{rec: rec, route: route, recorded: policy.RecordedSource(res.Recipe), unfinished: true}
		case store.Running:
			wait := min(max(time.Until(res.LeaseEnd), 10*time.Millisecond), store.SafetyPoll)
			t := time.NewTimer(wait)
			select {
			case <-changed:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				stop()
				return fmt.Errorf("%w: another instance holds the owner record of scope %q: %w", store.ErrUnavailable, rec.Identity.Scope, ctx.Err())
			}
			t.Stop()
			stop()
		default:
			stop()
			return fmt.Errorf("%w: unexpected owner record state %v", store.ErrUnavailable, res.State)
		}
	}
}

// ownerClaim is one Claim of rec's owner record with this proxy's owner
// token, bounded by the store timeout.
func (p *Proxy) ownerClaim(ctx context.Context, rec *policy.OwnerRecord) (store.ClaimResult, error) {
	ctx, cancel := context.WithTimeout(ctx, p.storeTimeout)
	defer cancel()
	res, err := p.store.Claim(ctx, store.ClaimParams{
		Identity:    rec.Identity,
		Fingerprint: rec.Fingerprint,
		Recipe:      rec.Recipe,
		Token:       p.ownerToken,
		Lease:       ownerRecordLease,
		Retention:   0, // kept forever (contract rule 6)
	})
	if err != nil {
		return res, fmt.Errorf("claiming the owner record of scope %q: %w", rec.Identity.Scope, err)
	}
	return res, nil
}

// passOwnerRecord marks rec checked by p, and remembers it for
// forgetOwnerRecords, unless that ran since the check began (gen): the
// check's answer may predate what the store lost. The request it was made
// for goes on either way; the next one checks again.
func (p *Proxy) passOwnerRecord(rec *policy.OwnerRecord, gen uint64) {
	p.conflictsMu.Lock()
	defer p.conflictsMu.Unlock()
	if gen != p.ownersForgotten {
		return
	}
	live := p.ownersPassed[:0]
	for _, w := range p.ownersPassed {
		if w.Value() != nil {
			live = append(live, w)
		}
	}
	p.ownersPassed = append(live, weak.Make(rec))
	// Marked under the lock, so a forgetOwnerRecords that runs meanwhile
	// never misses it.
	rec.Pass(p)
}

// forgetOwnerRecords makes every owner record p has checked be checked
// again on its next request.
func (p *Proxy) forgetOwnerRecords() {
	p.conflictsMu.Lock()
	defer p.conflictsMu.Unlock()
	for _, w := range p.ownersPassed {
		if rec := w.Value(); rec != nil {
			rec.Forget(p)
		}
	}
	p.ownersPassed = nil
	p.ownersForgotten++
}
