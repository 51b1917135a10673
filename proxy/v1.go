package proxy

import (
	"net/http"
	"slices"
	"time"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
)

// v1Action is what enforce does after checkV1.
type v1Action int

const (
	v1Forward  v1Action = iota // no layout 1 record stands in the way: forward under the claim
	v1Answered                 // the request has been answered
	v1Retry                    // the layout 1 record finished running: claim again
)

// checkV1 looks, for a key this request has just claimed fresh, for the
// record that idemgate wrote before layout 2 (docs/protocol.md, "Layout
// versions"): layout 1 scoped records by the route's name, so an operation
// completed or running before the upgrade is found only there. The fresh
// claim is held meanwhile, so no other instance of this version can forward
// the same key while the old record is read; the claim is released again
// whenever the old record answers the request.
//
// A completed layout 1 record with this request's fingerprint is copied
// into the claimed record (so later retries need no second read) and
// replayed; a different fingerprint is 422; a running one is waited for (or
// 409) like any running record; an abandoned one is taken over as a
// layout 2 record would be, by forwarding under the fresh claim.
func (p *Proxy) checkV1(w http.ResponseWriter, r *http.Request, ex *exchange, token string, names []string, waitUntil *time.Time) v1Action {
	route := ex.route
	var (
		old store.Identity
		rec *store.Record
	)
	for _, name := range names {
		old = store.Identity{Owner: ex.id.Owner, Scope: name, Key: ex.id.Key}
		ctx, cancel := p.storeCtx(r.Context())
		var err error
		rec, err = p.store.Get(ctx, old)
		cancel()
		if err != nil {
			p.release(r, ex, token)
			p.storeFailed(w, r, ex, "claim", err)
			return v1Answered
		}
		if rec != nil {
			break
		}
	}
	if rec == nil {
		return v1Forward
	}
	// Layout 1 records carry no recipe: they were fingerprinted with the
	// settings in force then, which the route's current ones are the best
	// (and, for an unchanged route, the exact) account of.
	fp := route.FingerprintOf(r, ex.body)
	if rec.Fingerprint != fp {
		p.release(r, ex, token)
		p.fail(w, r, ex, metrics.OutcomeMismatch, probMismatch.with(
			"this idempotency key was already used for a request with a different method, path, query, headers or body"))
		return v1Answered
	}
	switch rec.State {
	case store.Completed:
		if rec.Response != nil {
			ctx, cancel := p.storeCtx(r.Context())
			if _, err := p.store.Complete(ctx, ex.id, token, *rec.Response); err != nil {
				// Replaying is still right; the next retry reads the old
				// record again.
				p.release(r, ex, token)
			}
			cancel()
		} else {
			p.release(r, ex, token)
		}
		p.replay(w, r, ex, rec.Response)
		return v1Answered
	case store.Running:
		p.release(r, ex, token)
		retry := retryAfter(time.Until(rec.LeaseEnd))
		if route.Concurrent == policy.ConcurrentConflict {
			p.conflict(w, r, ex, retry)
			return v1Answered
		}
		if !p.wait(w, r, ex, old, retry, waitUntil) {
			return v1Answered
		}
		return v1Retry
	case store.Abandoned:
		if route.OnAbandoned == policy.AbandonedReject {
			p.release(r, ex, token)
			p.fail(w, r, ex, metrics.OutcomeAbandoned, probOutcomeUnknown.with(
				"the request that claimed this key stopped before it finished and the route does not retry it (on_abandoned: reject); an operator must purge the key"))
			return v1Answered
		}
		if p.holdTakeover(route) {
			// As for a layout 2 record: the store was failing until less
			// than a lease ago, so the holder may still record its response.
			p.release(r, ex, token)
			p.conflict(w, r, ex, retryAfter(route.Lease))
			return v1Answered
		}
		p.m.Takeover(route.Name)
		p.log.Warn("took over an abandoned claim of layout 1", "route", route.Name, "key_hash", keyHash(ex.id.Key))
		return v1Forward
	}
	return v1Forward
}

// v1Names returns the scopes under which a layout 1 record of this request
// may sit: the name of the route that governs it now and the names of the
// routes that governed it under every earlier policy this process served
// (Options.PreviousPolicies: a reload that renames a route, removes it or
// adds a more specific one must not hide the records written under the old
// name; adversarial finding F2 of issue 10), less the request's own layout
// 2 scope. Empty when v1 lookups are off.
func (p *Proxy) v1Names(r *http.Request, ex *exchange) []string {
	if !p.v1Lookup {
		return nil
	}
	var names []string
	add := func(name string) {
		if name != ex.id.Scope && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	add(ex.route.Name)
	if p.previous != nil {
		for _, old := range p.previous() {
			add(old.Decide(r).Route.Name)
		}
	}
	return names
}
