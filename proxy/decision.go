package proxy

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// step is what enforce does next with a claimed identity.
type step int

const (
	stepForward     step = iota // send the request upstream under the fresh claim
	stepLookV1                  // look for a layout 1 record before forwarding (checkV1)
	stepReplay                  // answer with the record's stored response
	stepWait                    // wait while the record runs, then claim again
	stepClaimAgain              // claim again at once
	stepRecompute               // fingerprint the request under the record's recipe, then decide again
	stepAnswer                  // answer with a problem
	stepStoreFailed             // the store failed: 503, or forward unprotected on a fail_open route
	stepClientGone              // the client left while waiting: answer nothing (statusClientClosed)
)

var stepNames = [...]string{"forward", "look-v1", "replay", "wait", "claim-again", "recompute", "answer", "store-failed", "client-gone"}

func (s step) String() string { return stepNames[s] }

// release says what becomes of the claim this request holds before the
// action runs.
type release int

const (
	keepClaim    release = iota // held on (forwarding), or there is none
	releaseNow                  // freed before answering: this request will not use it
	releaseLater                // freed in the background: the Claim call failed, so it may or may not stand
	adoptRecord                 // completed with the layout 1 record's response (action.response), freed if that fails
)

// action is a decision: what the claim loop does with one claim result, or
// with the end of a wait. It is a value so that every reaction to a claim
// is computed in one place, decideClaim (and decideV1 for a layout 1
// record), and every end of a wait in another, decideWait, which table
// tests cover without a server, and executed by one short loop (enforce,
// act).
type action struct {
	step    step
	release release
	// problem is the answer of stepAnswer; its kind fixes the outcome.
	problem problem.Details
	// response is what stepReplay writes, and what adoptRecord records.
	response *store.Response
	// retry is the Retry-After of stepWait when the wait times out.
	retry int
	// spec fingerprints the request again for stepRecompute.
	spec fingerprint.Spec
	// record is the completed record a wait ended on, for stepClaimAgain:
	// the next claim's answer, with no round trip (claim).
	record *store.Record
	// takeover: the claim replaced an abandoned one; count and log it.
	takeover bool
	// op and err name the store failure of stepStoreFailed.
	op  string
	err error
}

// claimState is what decideClaim reads: one claim's answer, the route and
// where the exchange stands.
type claimState struct {
	res store.ClaimResult
	// err is the Claim call's error.
	err   error
	route *policy.Route
	// fp and recipe are the request's fingerprint and how it was computed.
	fp, recipe string
	// recomputed: fp was just computed again under res.Recipe (stepRecompute).
	recomputed bool
	// held: takeovers are held back (holdTakeover), so the claim was made
	// without one.
	held bool
	// draining: the process starts no new upstream calls (Proxy.Drain).
	draining bool
	// v1Due: a fresh claim must look for a layout 1 record first
	// (Options.V1Lookup, and not done yet for this request).
	v1Due bool
	// started is when the attempt of an Abandoned record began (its
	// CreatedAt, read by abandonedStart); zero when unknown.
	started time.Time
	now     time.Time
}

// The details of the problems the claim decisions answer with.
const (
	detailKeyReused = "this idempotency key was already used for a request with a different method, path, query, headers or body"
	detailRecipe    = "this idempotency key was recorded by a version of idemgate whose fingerprint this one cannot compute, so it can be neither replayed nor run again"
	detailDraining  = "this instance is shutting down and starts no new upstream calls; retry with the same key"
	detailInFlight  = "a request with this idempotency key is still being processed; retry after the indicated time with the same key"
	detailGone      = "the request with this idempotency key was processed, and the resource it created was deleted since; it is not replayed and will not be forwarded again while the key is retained"
)

// decideClaim is the reaction to one claim. It is pure: it reads s only.
func decideClaim(s claimState) action {
	route, res := s.route, s.res
	if s.err != nil {
		a := action{step: stepStoreFailed, op: "claim", err: s.err}
		switch {
		case errors.Is(s.err, store.ErrCompletedNotAcknowledged):
			// The record is completed (its operation ran) and cannot be
			// replayed before its acknowledgement: refused, never
			// forwarded, on fail_open routes too, whose unprotected
			// forward is for a store that cannot say what ran. Nothing
			// was claimed, so nothing is released.
			a.op = "replay"
		case errors.Is(s.err, store.ErrNotAcknowledged):
			// The claim may stand on the primary, but a failover may lose
			// it: it does not count, nothing is forwarded, and it is
			// released (its lease bounds it if that fails too).
			a.release = releaseNow
		case route.OnStoreError == policy.FailClosed:
			// The claim may have been made although the reply was lost.
			a.release = releaseLater
		}
		return a
	}
	if res.State == store.Gone {
		// A tombstone keeps no fingerprint: every request with the key
		// gets 410, whatever it carries.
		return answer(problem.ResourceDeleted.With(detailGone))
	}
	if res.State != store.Claimed && res.Recipe != "" && res.Recipe != s.recipe {
		// The record was fingerprinted under other settings (the route's
		// fingerprint changed, or another instance runs another config):
		// compare this request the way the record's first one was.
		spec, err := fingerprint.ParseRecipe(res.Recipe)
		if err != nil {
			return answer(problem.KeyReused.With(detailRecipe))
		}
		return action{step: stepRecompute, spec: spec}
	}
	if s.recomputed && res.State == store.Abandoned && res.Fingerprint == s.fp {
		// The store refused the takeover only for the other recipe.
		return action{step: stepClaimAgain}
	}
	if res.State != store.Claimed && res.Fingerprint != s.fp {
		return answer(problem.KeyReused.With(detailKeyReused))
	}
	switch res.State {
	case store.Claimed:
		if !res.Takeover && s.v1Due {
			return action{step: stepLookV1}
		}
		return forwardUnlessDraining(s.draining, action{step: stepForward, takeover: res.Takeover})
	case store.Completed:
		return replayOf(res.Response, keepClaim)
	case store.Abandoned:
		if s.held {
			// The store was failing until less than a lease ago: the
			// holder may be alive and about to record its response.
			return conflict(keepClaim, retryAfter(route.Lease))
		}
		return answer(outcomeUnknown(s.started, s.now))
	case store.Running:
		if route.Concurrent == policy.ConcurrentConflict {
			return conflict(keepClaim, inProgressRetry)
		}
		return action{step: stepWait, retry: inProgressRetry}
	}
	return action{step: stepStoreFailed, op: "claim", err: fmt.Errorf("%w: unexpected claim state %v", store.ErrUnavailable, res.State)}
}

// v1State is what decideV1 reads: the layout 1 record found for a request
// that has just claimed its key fresh (checkV1).
type v1State struct {
	rec   *store.Record // nil when none was found
	route *policy.Route
	// fp is the request's fingerprint under the route's current settings:
	// layout 1 records carry no recipe, and the current settings are the
	// best (for an unchanged route, the exact) account of theirs.
	fp       string
	held     bool
	draining bool
	now      time.Time
}

// decideV1 is the reaction to a layout 1 record (docs/protocol.md, "Layout
// versions"), as decideClaim's is to a layout 2 one. The fresh claim is
// released whenever the old record answers the request (a completed one is
// recorded in it instead), and kept to forward under when there is no old
// record or it is abandoned and may be taken over. stepWait waits on the
// old record.
func decideV1(s v1State) action {
	rec := s.rec
	if rec == nil {
		return forwardUnlessDraining(s.draining, action{step: stepForward})
	}
	if rec.State == store.Gone {
		a := answer(problem.ResourceDeleted.With(detailGone))
		a.release = releaseNow
		return a
	}
	if rec.Fingerprint != s.fp {
		a := answer(problem.KeyReused.With(detailKeyReused))
		a.release = releaseNow
		return a
	}
	switch rec.State {
	case store.Completed:
		a := replayOf(rec.Response, releaseNow)
		if rec.Response != nil {
			// Copied into the fresh claim, so later retries need no
			// second read; replaying is right even if that fails.
			a.release, a.response = adoptRecord, rec.Response
		}
		return a
	case store.Running:
		if s.route.Concurrent == policy.ConcurrentConflict {
			return conflict(releaseNow, inProgressRetry)
		}
		return action{step: stepWait, release: releaseNow, retry: inProgressRetry}
	case store.Abandoned:
		if s.route.OnAbandoned == policy.AbandonedReject {
			a := answer(outcomeUnknown(rec.CreatedAt, s.now))
			a.release = releaseNow
			return a
		}
		if s.held {
			// As for a layout 2 record: the store was failing until less
			// than a lease ago, so the holder may still record its response.
			return conflict(releaseNow, retryAfter(s.route.Lease))
		}
		return forwardUnlessDraining(s.draining, action{step: stepForward, takeover: true})
	}
	return forwardUnlessDraining(s.draining, action{step: stepForward})
}

// forwardUnlessDraining returns a, a forward under a fresh claim, or, while
// the process drains, the refusal that replaces it: a call started now (a
// waiter whose first attempt released the key, a request accepted just
// before SIGTERM) could outlive the drain budget and be cut mid-way, its
// outcome unknown; refused, it is retried on another instance. The claim
// is released so that retry finds the key free.
func forwardUnlessDraining(draining bool, a action) action {
	if !draining {
		return a
	}
	refuse := answer(withRetry(problem.ShuttingDown.With(detailDraining), 1))
	refuse.release, refuse.takeover = releaseNow, a.takeover
	return refuse
}

// replayOf replays resp: a completed record whose response was not
// retained answers response-not-retained, and one without a response is a
// store fault.
func replayOf(resp *store.Response, rel release) action {
	switch {
	case resp == nil:
		return action{step: stepStoreFailed, release: rel, op: "claim", err: fmt.Errorf("%w: completed record without a response", store.ErrUnavailable)}
	case resp.Omitted:
		a := answer(problem.NotRetained.With(fmt.Sprintf(
			"the original request was processed (status %d) but its response exceeded max_response_bytes and was not stored; it will not be forwarded again", resp.Status)))
		a.release = rel
		return a
	}
	return action{step: stepReplay, release: rel, response: resp}
}

func answer(pr problem.Details) action { return action{step: stepAnswer, problem: pr} }

// conflict answers request-in-progress with Retry-After retry.
func conflict(rel release, retry int) action {
	a := answer(inProgress(retry))
	a.release = rel
	return a
}

// inProgress is the answer to a request whose key another request holds,
// also after a wait that timed out.
func inProgress(retry int) problem.Details {
	return withRetry(problem.InProgress.With(detailInFlight), retry)
}

// inProgressRetry is the Retry-After, in seconds, of every 409
// request-in-progress: a short fixed hint. The instance cannot know when a
// running call ends: the holder's lease end is no estimate (a live holder
// extends it every lease/3, so it always lies most of a lease ahead, and a
// call that finishes half a second later was answered "retry in 8 s"), and
// a retry on a concurrent: wait route waits for the call again anyway
// (docs/routing.md, "How a request is handled", Running).
const inProgressRetry = 1

// outcomeUnknown is the answer to a retry of an abandoned call on an
// on_abandoned: reject route: the call that started at started (zero when
// unknown) stopped before its outcome was recorded, so it can be neither
// replayed nor safely run again. The detail gives the start as RFC 3339
// (UTC, millisecond precision, as the admin API shows it) and its age, so
// the client's owner and an operator can find it in the backend's logs.
func outcomeUnknown(started, now time.Time) problem.Details {
	when := "at an unknown time"
	if !started.IsZero() {
		age := max(now.Sub(started), 0).Round(time.Second)
		when = fmt.Sprintf("at %s (%s ago)", started.UTC().Format("2006-01-02T15:04:05.000Z07:00"), age)
	}
	return problem.OutcomeUnknown.With("the first request with this idempotency key started " + when +
		" and stopped before its outcome was recorded (its proxy stopped, or the upstream's answer was lost); " +
		"its outcome cannot be known, so it is neither replayed nor run again (on_abandoned: reject). " +
		"An operator can check the backend and purge the key (idemgate admin purge) to let a retry run it")
}

// statusClientClosed is the status a request is logged and counted under
// when its client left before it was answered (nginx's 499 "client closed
// request"); nothing is written.
const statusClientClosed = 499

// waitState is what decideWait reads: how one wait of a request on a
// running record went.
type waitState struct {
	// full: every waiter slot was taken (server.max_waiters), so the
	// request did not wait.
	full bool
	// expired: the request's wait limit (its first wait plus
	// wait_timeout) had passed before this wait began.
	expired bool
	// rec is the record the wait ended on: never running; nil when it is
	// gone. err is the wait's error: the store's, the client's context's,
	// or context.DeadlineExceeded at the limit (waitWhileRunning).
	rec *store.Record
	err error
	// clientGone: the request's context ended (the client left).
	clientGone bool
	// own: the wait was on the request's own identity, not on a layout 1
	// record (checkV1), so a completed record answers its next claim.
	own bool
	// retry is the Retry-After of a 409 that ends the wait.
	retry int
}

// decideWait is the reaction to the end of a wait, as decideClaim's is to
// a claim: claim again (with the completed record the wait ended on, when
// it is the request's own, as the next claim's answer), 409
// request-in-progress (every slot taken, the limit passed, the wait timed
// out), a store failure, or, for a client that left, nothing at all. It is
// pure: it reads s only.
func decideWait(s waitState) action {
	switch {
	case s.full:
		return answer(withRetry(problem.InProgress.With(detailTooManyWaiters), s.retry))
	case s.expired:
		return answer(inProgress(s.retry))
	case s.err == nil:
		a := action{step: stepClaimAgain}
		if s.own && s.rec != nil && s.rec.State == store.Completed {
			a.record = s.rec
		}
		return a
	case errors.Is(s.err, store.ErrUnavailable):
		return action{step: stepStoreFailed, op: "wait", err: s.err}
	case s.clientGone:
		return action{step: stepClientGone}
	}
	return answer(inProgress(s.retry))
}

// Waiting for a holder whose lease is about to end (decideWaitEnd).
const (
	// leaseEndMargin: a wait whose limit comes at most this long before the
	// holder's lease end goes on to that lease end. A holder that is alive
	// extends its lease every lease/3, so at any moment its lease end lies
	// at least two thirds of a lease ahead; one whose lease ends within
	// the margin has, for any lease above 1.5 s, stopped extending it.
	leaseEndMargin = time.Second
	// leaseEndSlack is how long past the holder's lease end the waiter
	// keeps waiting for the wait to see the record abandoned: the wake-up
	// at the lease end (pollUntilNotRunning), one store read, and a store
	// clock a little behind this instance's.
	leaseEndSlack = 500 * time.Millisecond
)

// waitEndState is what decideWaitEnd reads: a wait of this request reached
// its end, and the holder's record is still running.
type waitEndState struct {
	// limit is the request's wait limit: its first wait plus wait_timeout.
	limit time.Time
	// leaseEnd is the holder's lease end as the store has it now.
	leaseEnd time.Time
	now      time.Time
}

// decideWaitEnd says until when a wait that reached its end goes on: zero
// to stop now (409 request-in-progress), else a later end. The rule:
// a waiter whose wait limit falls no more than leaseEndMargin before the
// holder's lease end waits for that lease end (plus leaseEndSlack), so
// that it gets the lease-end decision (outcome-unknown, or a takeover
// where the route says so) instead of a 409 that sends its client back
// one more time. That is the case of the defaults (wait_timeout equal to
// the lease): a client that retries at once on another instance after
// the first one died waits exactly as long as the dead holder's lease
// still runs. The total wait stays below the limit plus leaseEndMargin
// plus leaseEndSlack. It is pure: it reads s only.
func decideWaitEnd(s waitEndState) time.Time {
	last := s.limit.Add(leaseEndMargin + leaseEndSlack)
	if s.leaseEnd.IsZero() || s.leaseEnd.After(s.limit.Add(leaseEndMargin)) || !s.now.Before(last) {
		return time.Time{}
	}
	end := s.leaseEnd.Add(leaseEndSlack)
	if !end.After(s.now) {
		// The lease has ended by this clock but the store still had the
		// record running: its clock is behind; look once more soon.
		end = s.now.Add(leaseEndSlack)
	}
	if end.After(last) {
		return last
	}
	return end
}

// retryAfter rounds d up to whole seconds, at least 1 (RFC 9110 section 10.2.3).
func retryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}
