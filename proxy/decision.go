package proxy

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/policy"
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
)

var stepNames = [...]string{"forward", "look-v1", "replay", "wait", "claim-again", "recompute", "answer", "store-failed"}

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

// action is a decision: what the claim loop does with one claim result. It
// is a value so that every reaction to a claim is computed in one place,
// decideClaim (and decideV1 for a layout 1 record), which a table test
// covers without a server, and executed by one short loop (enforce).
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
	spec policy.FingerprintSpec
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
	now   time.Time
}

// The details of the problems the claim decisions answer with.
const (
	detailKeyReused = "this idempotency key was already used for a request with a different method, path, query, headers or body"
	detailRecipe    = "this idempotency key was recorded by a version of idemgate whose fingerprint this one cannot compute, so it can be neither replayed nor run again"
	detailRejected  = "the request that claimed this key stopped before it finished and the route does not retry it (on_abandoned: reject); an operator must purge the key"
	detailDraining  = "this instance is shutting down and starts no new upstream calls; retry with the same key"
	detailInFlight  = "a request with this idempotency key is still being processed; retry after the indicated time"
	detailGone      = "the request with this idempotency key was processed, and the resource it created was deleted since; it is not replayed and will not be forwarded again while the key is retained"
)

// decideClaim is the reaction to one claim. It is pure: it reads s only.
func decideClaim(s claimState) action {
	route, res := s.route, s.res
	if s.err != nil {
		a := action{step: stepStoreFailed, op: "claim", err: s.err}
		switch {
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
		spec, err := policy.ParseRecipe(res.Recipe)
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
		return answer(problem.OutcomeUnknown.With(detailRejected))
	case store.Running:
		retry := retryAfter(res.LeaseEnd.Sub(s.now))
		if route.Concurrent == policy.ConcurrentConflict {
			return conflict(keepClaim, retry)
		}
		return action{step: stepWait, retry: retry}
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
		retry := retryAfter(rec.LeaseEnd.Sub(s.now))
		if s.route.Concurrent == policy.ConcurrentConflict {
			return conflict(releaseNow, retry)
		}
		return action{step: stepWait, release: releaseNow, retry: retry}
	case store.Abandoned:
		if s.route.OnAbandoned == policy.AbandonedReject {
			a := answer(problem.OutcomeUnknown.With(detailRejected))
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

// retryAfter rounds d up to whole seconds, at least 1 (RFC 9110 section 10.2.3).
func retryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}
