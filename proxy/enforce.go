package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// enforce claims the identity and carries out the decision on the answer
// (decideClaim; decideV1 for a layout 1 record), until the request is
// answered (the package documentation gives the whole flow).
func (p *Proxy) enforce(w http.ResponseWriter, r *http.Request, ex *exchange) {
	for first := true; ; first = false {
		// A store its connector finds down would make this request wait
		// for the store timeout and fail anyway (Options.StoreDown).
		if p.storeDown != nil && p.storeDown() {
			p.refuseStoreDown(w, r, ex)
			return
		}
		// The scope's owner record before its first claim under this
		// policy, in this proxy: one atomic load once it is checked.
		if first && !p.ownersChecked(w, r, ex) {
			return
		}
		// Past server.max_store_waiting a new request is refused here, at
		// once, before anything is claimed (admission.go).
		if !p.enterStore(w, ex, first) {
			return
		}
		t, err := p.claimRound(r, ex)
		if err != nil {
			p.storeFailed(w, r, ex, "complete", err)
			return
		}
		if !p.act(t) {
			return
		}
	}
}

// claimOutcome is what one round of the claim loop ends on, what act
// carries out: the decision on a claim's answer, for the request of ex,
// with what it acts on.
type claimOutcome struct {
	ex *exchange
	a  action
	// token is the claim this request holds, "" for none.
	token string
	// waitOn is the record stepWait waits for: the request's own, or a
	// layout 1 record (checkV1).
	waitOn store.Identity
}

// claimRound is one round of enforce's store calls, the ones admission
// bounds: a pending completion, the claim and the decision on its answer,
// with the layout 1 lookup. It returns the outcome to act on, or the error of
// the pending completion. The admission ends when it returns, before the
// action: a forward, a wait or a completion is not a wait for the store's
// answer to a claim.
func (p *Proxy) claimRound(r *http.Request, ex *exchange) (claimOutcome, error) {
	defer p.leaveStore()
	// A response this instance could not record yet is recorded first:
	// the claim below would otherwise find the record past its lease and
	// run the operation again.
	if err := p.recordPending(r.Context(), ex.id); err != nil {
		return claimOutcome{}, err
	}
	s, token := p.claim(r, ex)
	a := decideClaim(s)
	if a.step == stepRecompute {
		ex.fp, ex.recipe = a.spec.Of(r, ex.body), s.res.Recipe
		s.fp, s.recipe, s.recomputed = ex.fp, ex.recipe, true
		a = decideClaim(s)
	}
	waitOn := ex.id
	if a.step == stepLookV1 {
		a, waitOn = p.checkV1(r, ex)
	}
	return claimOutcome{ex: ex, a: a, token: token, waitOn: waitOn}, nil
}

// claim claims ex's identity with a new token and returns what decideClaim
// needs to know about the answer, and the token. The completed record a
// wait of this request ended on, or one the store's replay cache holds
// (store.ReplayCache), answers instead, as a Completed claim would, with
// no token: decideClaim compares its
// fingerprint and recipe the same way, so a cached replay and a claimed
// one never differ.
func (p *Proxy) claim(r *http.Request, ex *exchange) (claimState, string) {
	route := ex.route
	// The completed record the wait ended on (wait), else the cache's:
	// Completed is final while the record lives, so either is the answer
	// a claim would get.
	rec := ex.waited
	ex.waited = nil
	if rec == nil {
		rec = p.cachedReplay(r, ex)
	}
	if rec != nil {
		return claimState{
			res:   store.ClaimResult{State: store.Completed, Fingerprint: rec.Fingerprint, Recipe: rec.Recipe, Response: rec.Response},
			route: route, fp: ex.fp, recipe: ex.recipe,
			draining: p.draining.Load(), now: time.Now(),
		}, ""
	}
	token := p.newToken()
	// Held back on reject routes too: a holder that may still record its
	// response must not be answered the terminal outcome-unknown either.
	held := p.holdTakeover(route)
	ctx := p.storeCtx(r.Context())
	res, err := p.store.Claim(ctx, store.ClaimParams{
		Identity:    ex.id,
		Fingerprint: ex.fp,
		Recipe:      ex.recipe,
		Token:       token,
		Lease:       route.Lease,
		Retention:   route.Retention,
		NoTakeover:  route.OnAbandoned == policy.AbandonedReject || held,
	})
	ctx.cancel()
	if err == nil {
		p.noteStoreOK()
	}
	s := claimState{
		res: res, err: err, route: route, fp: ex.fp, recipe: ex.recipe,
		held: held, draining: p.draining.Load(), v1Due: p.v1Lookup,
	}
	if err == nil && res.State == store.Abandoned && route.OnAbandoned == policy.AbandonedReject && !held {
		s.started = p.abandonedStart(r, ex.id)
	}
	s.now = time.Now()
	return s, token
}

// abandonedStart returns when the abandoned call on id started (the
// record's CreatedAt), for the outcome-unknown detail; zero when the
// record cannot be read. One read, on a path that answers a terminal
// problem anyway: the claim's answer does not carry the start.
func (p *Proxy) abandonedStart(r *http.Request, id store.Identity) time.Time {
	ctx := p.storeCtx(r.Context())
	defer ctx.cancel()
	rec, err := p.store.Get(ctx, id)
	if err != nil || rec == nil {
		return time.Time{}
	}
	return rec.CreatedAt
}

// cachedReplay returns ex's record from the store's replay cache when
// the cache holds it completed, else nil: also when the cache read fails,
// since the claim that follows then decides, and fails closed if the store
// is gone.
//
// It is not asked while the store has failed since its last answered claim
// (noteStoreError, NoteStoreFailure): a stalled server leaves a connection
// open, and its cache with it, until the client's ping times out, and a
// purge or tombstone made meanwhile could not reach it. Every keyed
// request then fails closed as without a cache, until a claim succeeds;
// while the connector finds the store down (Options.StoreDown) enforce
// refuses before it gets here.
func (p *Proxy) cachedReplay(r *http.Request, ex *exchange) *store.Record {
	if p.health.failing.Load() != 0 {
		return nil
	}
	ctx := ex.cacheCtx(r.Context(), p.storeTimeout)
	rec, _, err := store.CachedReplayOf(ctx, p.store, ex.id)
	ctx.cancel()
	if err != nil {
		p.log.Debug("replay cache read failed; claiming", "route", ex.route.Name, "err", err)
		return nil
	}
	if rec == nil || rec.State != store.Completed {
		return nil
	}
	return rec
}

// act carries out t's action: first what becomes of the claim held with
// t.token, then the step; a wait goes on with the action its end decides
// (decideWait). It reports whether the loop claims again; when it returns
// false the request has been answered, or its client has left.
func (p *Proxy) act(t claimOutcome) bool {
	ex, a, token := t.ex, t.a, t.token
	w, r := http.ResponseWriter(ex.w), ex.r
	if a.takeover {
		p.m.Takeover(ex.route.Name)
		p.log.Warn("took over an abandoned claim", "route", ex.route.Name, "key_hash", keyHash(ex.id))
	}
	switch a.release {
	case releaseNow:
		p.release(r, ex, token)
	case releaseLater:
		p.releaseLater(ex, token)
	case adoptRecord:
		ctx := p.storeCtx(r.Context())
		if _, err := p.store.Complete(ctx, ex.id, token, *a.response); err != nil {
			// Replaying is still right; the next retry reads the old
			// record again.
			p.release(r, ex, token)
		}
		ctx.cancel()
	}
	if a.step == stepWait {
		a = p.wait(ex, t.waitOn, a.retry)
	}
	switch a.step {
	case stepForward:
		p.forward(w, r, ex, token)
	case stepReplay:
		p.replay(w, r, ex, a.response)
	case stepClaimAgain:
		// The completed record a wait ended on answers the next claim.
		ex.waited = a.record
		return true
	case stepAnswer:
		p.fail(w, ex, a.problem)
	case stepClientGone:
		// Nothing to write: nobody reads it. The request ends as a
		// conflict the client did not stay for.
		ex.outcome, ex.status = metrics.OutcomeConflict, statusClientClosed
	default: // stepStoreFailed (enforce resolves stepRecompute and stepLookV1 before acting)
		p.storeFailed(w, r, ex, a.op, a.err)
	}
	return false
}

// releaseLater frees, in the background, a claim whose Claim call failed:
// the script may still have run (the reply was lost, or a stalled store
// applied it after the timeout), and nobody would hold that claim, so the
// client's retry, told to come back in a second, would find it running and
// wait out a whole lease. Release acts only while the record holds token,
// so it never frees another request's claim. It tries with backoff until
// the lease of that claim would have ended anyway.
func (p *Proxy) releaseLater(ex *exchange, token string) {
	id, lease := ex.id, ex.route.Lease
	go func() {
		deadline := time.Now().Add(lease)
		backoff := 100 * time.Millisecond
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), p.storeTimeout)
			released, err := p.store.Release(ctx, id, token)
			cancel()
			if err == nil {
				if released {
					p.log.Info("released a claim whose reply was lost", "scope", id.Scope, "key_hash", keyHash(id))
				}
				return
			}
			time.Sleep(min(backoff, time.Until(deadline)))
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
}

// Drain makes the proxy start no new enforced upstream calls: a request
// that claims its key from now on releases it and gets 503 shutting-down
// (Retry-After: 1), while calls already running finish and record their
// outcome. Replays, waits and passthrough traffic are served as before.
// Call it when the process starts to shut down, before
// http.Server.Shutdown; it cannot be undone.
func (p *Proxy) Drain() { p.draining.Store(true) }

// storeFailed answers a store failure: 503 (fail closed) or, on routes that
// chose fail_open, forwards the request unprotected.
func (p *Proxy) storeFailed(w http.ResponseWriter, r *http.Request, ex *exchange, op string, err error) {
	if errors.Is(err, store.ErrStoredResponseDamaged) {
		// The record exists and its operation ran: replaying it would hand
		// out other bytes than the upstream sent, and running it again
		// (fail_open included) would break the one execution. Not a store
		// outage either, so takeovers are not held back.
		ex.cause = err
		p.m.StoredResponseDamaged(ex.route.Name)
		p.log.Error("stored response failed its integrity check; not replayed", "op", op, "route", ex.route.Name,
			"key_hash", keyHash(ex.id), "err", err)
		p.fail(w, ex, problem.StoredResponseDamaged.With(
			"the response stored for this key failed its integrity check, so it was not replayed and the request was not forwarded again; an operator can inspect and purge the record"))
		return
	}
	if errors.Is(err, store.ErrStoredResponse) {
		// A completed record whose response does not parse (a flag no
		// writer of this version sets): the store answered, and its
		// operation ran, so a fail_open route must not forward it as if
		// the store could not be reached; refused, and retried, as on a
		// fail_closed route
		// (TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain).
		op = "replay"
	}
	p.noteStoreError()
	ex.cause = err
	p.log.Error("store operation failed", "op", op, "route", ex.route.Name, "err", err)
	p.storeUnavailable(w, r, ex, op)
}

// errStoreDown is the cause of a refusal while the connector finds the
// store down (refuseStoreDown).
var errStoreDown = fmt.Errorf("the store's connection check finds it unreachable: %w", store.ErrUnavailable)

// refuseStoreDown answers, without a store call, a keyed request that
// arrives while the connector finds the store down, exactly as a claim
// that failed: 503 store-unavailable, or unprotected on a fail_open route.
// One warning per warnEvery, not an error per request: an outage refuses
// every keyed request, now as fast as they come.
func (p *Proxy) refuseStoreDown(w http.ResponseWriter, r *http.Request, ex *exchange) {
	p.noteStoreError()
	ex.cause = errStoreDown
	now := time.Now().UnixNano()
	if last := p.downWarned.Load(); now-last >= int64(warnEvery) && p.downWarned.CompareAndSwap(last, now) {
		p.log.Warn("keyed requests refused at once: the store is down", "route", ex.route.Name, "on_store_error", string(ex.route.OnStoreError))
	}
	p.storeUnavailable(w, r, ex, "claim")
}

// storeUnavailable answers a request whose store operation op could not
// be made: 503 with Retry-After, or the fail_open route's unprotected
// forward when op is the claim.
func (p *Proxy) storeUnavailable(w http.ResponseWriter, r *http.Request, ex *exchange, op string) {
	if ex.route.OnStoreError == policy.FailOpen && op == "claim" && !p.draining.Load() {
		// Unprotected by the route's choice, but never a new call during
		// the drain (see Drain).
		p.forwardUnprotected(w, r, ex)
		return
	}
	p.fail(w, ex, withRetry(problem.StoreUnavailable.With(
		"the idempotency store cannot be reached, so the request was not forwarded; retry later with the same key"), 1))
}
