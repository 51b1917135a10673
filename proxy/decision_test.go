package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// TestDecideClaim covers every reaction to a claim result without a server
// or a store: the decision is a value, enforce only carries it out.
func TestDecideClaim(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	wait := &policy.Route{Name: "r", Lease: 10 * time.Second, Concurrent: policy.ConcurrentWait, OnStoreError: policy.FailClosed}
	conflictRoute := &policy.Route{Name: "r", Lease: 10 * time.Second, Concurrent: policy.ConcurrentConflict}
	failOpen := &policy.Route{Name: "r", OnStoreError: policy.FailOpen}
	otherRecipe := (fingerprint.Spec{Query: true, Body: fingerprint.BodyRaw}).Recipe()
	resp := &store.Response{Status: 201, Body: []byte("ok")}
	running := store.ClaimResult{State: store.Running, Fingerprint: "fp", Recipe: "rc", LeaseEnd: now.Add(2500 * time.Millisecond)}

	cases := []struct {
		name    string
		s       claimState
		step    step
		release release
		kind    *problem.Kind
		retry   int // Retry-After of the answer, or of the wait
		check   func(t *testing.T, a action)
	}{
		{name: "fresh claim forwards", s: claimState{res: store.ClaimResult{State: store.Claimed}},
			step: stepForward},
		{name: "fresh claim looks for layout 1 first", s: claimState{res: store.ClaimResult{State: store.Claimed}, v1Due: true},
			step: stepLookV1},
		{name: "takeover forwards and is counted, no layout 1 lookup", s: claimState{res: store.ClaimResult{State: store.Claimed, Takeover: true}, v1Due: true},
			step: stepForward, check: func(t *testing.T, a action) {
				if !a.takeover {
					t.Error("takeover not counted")
				}
			}},
		{name: "draining refuses and releases", s: claimState{res: store.ClaimResult{State: store.Claimed}, draining: true},
			step: stepAnswer, release: releaseNow, kind: &problem.ShuttingDown, retry: 1},
		{name: "completed replays", s: claimState{res: store.ClaimResult{State: store.Completed, Fingerprint: "fp", Recipe: "rc", Response: resp}},
			step: stepReplay, check: func(t *testing.T, a action) {
				if a.response != resp {
					t.Error("replays another response")
				}
			}},
		{name: "completed not retained", s: claimState{res: store.ClaimResult{State: store.Completed, Fingerprint: "fp", Recipe: "rc", Response: &store.Response{Status: 201, Omitted: true}}},
			step: stepAnswer, kind: &problem.NotRetained},
		{name: "completed without a response is a store fault", s: claimState{res: store.ClaimResult{State: store.Completed, Fingerprint: "fp", Recipe: "rc"}},
			step: stepStoreFailed},
		{name: "other fingerprint", s: claimState{res: store.ClaimResult{State: store.Completed, Fingerprint: "other", Recipe: "rc", Response: resp}},
			step: stepAnswer, kind: &problem.KeyReused},
		// Retry-After is the fixed short hint, not the 2.5 s left of the
		// holder's lease, which a live holder keeps pushing ahead.
		{name: "running waits", s: claimState{res: running},
			step: stepWait, retry: 1},
		{name: "running conflicts on a conflict route", s: claimState{res: running, route: conflictRoute},
			step: stepAnswer, kind: &problem.InProgress, retry: 1},
		{name: "running past its lease end still says 1 s", s: claimState{res: store.ClaimResult{State: store.Running, Fingerprint: "fp", Recipe: "rc", LeaseEnd: now.Add(-time.Second)}, route: conflictRoute},
			step: stepAnswer, kind: &problem.InProgress, retry: 1},
		{name: "abandoned under on_abandoned: reject", s: claimState{res: store.ClaimResult{State: store.Abandoned, Fingerprint: "fp", Recipe: "rc"}, started: now.Add(-83 * time.Second)},
			step: stepAnswer, kind: &problem.OutcomeUnknown, check: func(t *testing.T, a action) {
				for _, want := range []string{"started at 2023-11-14T22:11:57.000Z (1m23s ago)", "cannot be known", "purge"} {
					if !strings.Contains(a.problem.Detail, want) {
						t.Errorf("detail %q lacks %q", a.problem.Detail, want)
					}
				}
			}},
		{name: "abandoned, start unknown", s: claimState{res: store.ClaimResult{State: store.Abandoned, Fingerprint: "fp", Recipe: "rc"}},
			step: stepAnswer, kind: &problem.OutcomeUnknown, check: func(t *testing.T, a action) {
				if !strings.Contains(a.problem.Detail, "started at an unknown time") {
					t.Errorf("detail %q", a.problem.Detail)
				}
			}},
		{name: "abandoned while takeovers are held back", s: claimState{res: store.ClaimResult{State: store.Abandoned, Fingerprint: "fp", Recipe: "rc"}, held: true},
			step: stepAnswer, kind: &problem.InProgress, retry: 10},
		{name: "other recipe: fingerprint again", s: claimState{res: store.ClaimResult{State: store.Completed, Fingerprint: "fp2", Recipe: otherRecipe, Response: resp}},
			step: stepRecompute, check: func(t *testing.T, a action) {
				if a.spec.Recipe() != otherRecipe {
					t.Errorf("spec %q, want the record's %q", a.spec.Recipe(), otherRecipe)
				}
			}},
		{name: "recipe this version cannot compute", s: claimState{res: store.ClaimResult{State: store.Completed, Fingerprint: "fp", Recipe: "v=99", Response: resp}},
			step: stepAnswer, kind: &problem.KeyReused},
		{name: "abandoned, same fingerprint under its recipe: claim again", s: claimState{res: store.ClaimResult{State: store.Abandoned, Fingerprint: "fp", Recipe: "rc"}, recomputed: true},
			step: stepClaimAgain},
		{name: "claim not acknowledged: released, 503", s: claimState{err: fmt.Errorf("x: %w", store.ErrNotAcknowledged)},
			step: stepStoreFailed, release: releaseNow},
		{name: "claim failed, fail closed: released later", s: claimState{err: store.ErrUnavailable},
			step: stepStoreFailed, release: releaseLater},
		{name: "claim failed, fail open: nothing to release", s: claimState{err: store.ErrUnavailable, route: failOpen},
			step: stepStoreFailed, release: keepClaim},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			s.now = now
			if s.route == nil {
				s.route = wait
			}
			if s.res.State != store.Claimed && s.err == nil && s.fp == "" {
				s.fp, s.recipe = "fp", "rc"
			}
			a := decideClaim(s)
			if a.step != c.step || a.release != c.release {
				t.Fatalf("got %v (release %d), want %v (release %d)", a.step, a.release, c.step, c.release)
			}
			checkAnswer(t, a, c.kind, c.retry)
			if c.check != nil {
				c.check(t, a)
			}
		})
	}
}

// TestDecideV1 covers the reactions to a layout 1 record found for a fresh
// claim.
func TestDecideV1(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	route := &policy.Route{Name: "r", Lease: 10 * time.Second, Concurrent: policy.ConcurrentWait, OnAbandoned: policy.AbandonedTakeover}
	reject := &policy.Route{Name: "r", Lease: 10 * time.Second, OnAbandoned: policy.AbandonedReject}
	conflictRoute := &policy.Route{Name: "r", Lease: 10 * time.Second, Concurrent: policy.ConcurrentConflict}
	resp := &store.Response{Status: 201}
	rec := func(state store.State, fp string) *store.Record {
		return &store.Record{State: state, Fingerprint: fp, Response: resp, LeaseEnd: now.Add(1500 * time.Millisecond)}
	}
	cases := []struct {
		name     string
		s        v1State
		step     step
		release  release
		kind     *problem.Kind
		retry    int
		takeover bool
	}{
		{name: "none: forward", s: v1State{}, step: stepForward},
		{name: "none while draining", s: v1State{draining: true}, step: stepAnswer, release: releaseNow, kind: &problem.ShuttingDown, retry: 1},
		{name: "other fingerprint", s: v1State{rec: rec(store.Completed, "other")}, step: stepAnswer, release: releaseNow, kind: &problem.KeyReused},
		{name: "completed: adopted and replayed", s: v1State{rec: rec(store.Completed, "fp")}, step: stepReplay, release: adoptRecord},
		{name: "completed without response", s: v1State{rec: &store.Record{State: store.Completed, Fingerprint: "fp"}}, step: stepStoreFailed, release: releaseNow},
		{name: "completed not retained: adopted", s: v1State{rec: &store.Record{State: store.Completed, Fingerprint: "fp", Response: &store.Response{Omitted: true}}},
			step: stepAnswer, release: adoptRecord, kind: &problem.NotRetained},
		{name: "running: wait on it", s: v1State{rec: rec(store.Running, "fp")}, step: stepWait, release: releaseNow, retry: 1},
		{name: "running, conflict route", s: v1State{rec: rec(store.Running, "fp"), route: conflictRoute}, step: stepAnswer, release: releaseNow, kind: &problem.InProgress, retry: 1},
		{name: "abandoned, reject", s: v1State{rec: rec(store.Abandoned, "fp"), route: reject}, step: stepAnswer, release: releaseNow, kind: &problem.OutcomeUnknown},
		{name: "abandoned, held back", s: v1State{rec: rec(store.Abandoned, "fp"), held: true}, step: stepAnswer, release: releaseNow, kind: &problem.InProgress, retry: 10},
		{name: "abandoned: taken over", s: v1State{rec: rec(store.Abandoned, "fp")}, step: stepForward, takeover: true},
		{name: "abandoned while draining: counted, refused", s: v1State{rec: rec(store.Abandoned, "fp"), draining: true},
			step: stepAnswer, release: releaseNow, kind: &problem.ShuttingDown, retry: 1, takeover: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			s.now, s.fp = now, "fp"
			if s.route == nil {
				s.route = route
			}
			a := decideV1(s)
			if a.step != c.step || a.release != c.release || a.takeover != c.takeover {
				t.Fatalf("got %v (release %d, takeover %v), want %v (release %d, takeover %v)", a.step, a.release, a.takeover, c.step, c.release, c.takeover)
			}
			if a.release == adoptRecord && a.response != s.rec.Response {
				t.Error("adopts another response than the record's")
			}
			checkAnswer(t, a, c.kind, c.retry)
		})
	}
}

// checkAnswer checks a stepAnswer's problem kind and Retry-After, and a
// stepWait's Retry-After.
func checkAnswer(t *testing.T, a action, kind *problem.Kind, retry int) {
	t.Helper()
	switch a.step {
	case stepAnswer:
		if kind == nil || a.problem.Type != kind.Type() || a.problem.Outcome != kind.Outcome || a.problem.Status != kind.Status {
			t.Errorf("answers %+v, want kind %+v", a.problem, kind)
		}
		if a.problem.RetryAfter != retry {
			t.Errorf("Retry-After %d, want %d", a.problem.RetryAfter, retry)
		}
	case stepWait:
		if a.retry != retry {
			t.Errorf("wait's Retry-After %d, want %d", a.retry, retry)
		}
	}
}

// TestDecideWaitEnd covers the rule for a wait that reached its end while
// the holder's record still runs: it goes on to the holder's lease end
// when that comes no more than leaseEndMargin after the wait limit (the
// defaults, wait_timeout equal to the lease, after the holder died), and
// stops otherwise (a live holder, whose lease lies most of a lease ahead).
func TestDecideWaitEnd(t *testing.T) {
	limit := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name     string
		leaseEnd time.Time
		now      time.Time
		want     time.Time // zero: stop
	}{
		{"lease ends just after the limit: wait for it", limit.Add(300 * time.Millisecond), limit, limit.Add(800 * time.Millisecond)},
		{"lease ends exactly at the limit plus the margin", limit.Add(leaseEndMargin), limit, limit.Add(leaseEndMargin + leaseEndSlack)},
		{"lease ended just before the limit, the wait has not seen it yet", limit.Add(-100 * time.Millisecond), limit, limit.Add(400 * time.Millisecond)},
		{"store clock behind: a little more, bounded", limit.Add(200 * time.Millisecond), limit.Add(time.Second), limit.Add(leaseEndMargin + leaseEndSlack)},
		{"past the bound: stop", limit.Add(200 * time.Millisecond), limit.Add(leaseEndMargin + leaseEndSlack), time.Time{}},
		{"a live holder's lease lies ahead: stop", limit.Add(7 * time.Second), limit, time.Time{}},
		{"just beyond the margin: stop", limit.Add(leaseEndMargin + time.Millisecond), limit, time.Time{}},
		{"no lease end known: stop", time.Time{}, limit, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decideWaitEnd(waitEndState{limit: limit, leaseEnd: c.leaseEnd, now: c.now})
			if !got.Equal(c.want) {
				t.Fatalf("wait until %v, want %v", got.Sub(limit), c.want.Sub(limit))
			}
		})
	}
}

// TestPollDelay: the shared wait reads the record again just past the
// holder's lease end, never later than store.SafetyPoll, never sooner
// than minPoll.
func TestPollDelay(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		leaseEnd time.Time
		want     time.Duration
	}{
		{now.Add(10 * time.Second), store.SafetyPoll},
		{now.Add(300 * time.Millisecond), 300*time.Millisecond + pollPastLease},
		{now.Add(-time.Second), minPoll},
	} {
		if got := pollDelay(c.leaseEnd, now); got != c.want {
			t.Errorf("lease end in %v: poll in %v, want %v", c.leaseEnd.Sub(now), got, c.want)
		}
	}
}

// TestDecideWait covers every end of a wait without a server or a store,
// as TestDecideClaim does for a claim: the decision is a value, act only
// carries it out. A client that left gets nothing and is counted as 499;
// a store failure outranks it, as it did when wait decided by hand.
func TestDecideWait(t *testing.T) {
	done := &store.Record{State: store.Completed, Response: &store.Response{Status: 201}}
	released := &store.Record{State: store.Abandoned}
	cases := []struct {
		name   string
		s      waitState
		step   step
		kind   *problem.Kind
		detail string
		record *store.Record
		op     string
	}{
		{name: "every slot taken: 409 at once", s: waitState{full: true},
			step: stepAnswer, kind: &problem.InProgress, detail: detailTooManyWaiters},
		{name: "limit passed before the wait: 409", s: waitState{expired: true},
			step: stepAnswer, kind: &problem.InProgress, detail: detailInFlight},
		{name: "ended on the own completed record: claim with it", s: waitState{rec: done, own: true},
			step: stepClaimAgain, record: done},
		{name: "ended on a layout 1 record: claim afresh", s: waitState{rec: done},
			step: stepClaimAgain},
		{name: "ended on a record not completed: claim afresh", s: waitState{rec: released, own: true},
			step: stepClaimAgain},
		{name: "record gone: claim afresh", s: waitState{own: true},
			step: stepClaimAgain},
		{name: "timed out: 409", s: waitState{err: context.DeadlineExceeded, own: true},
			step: stepAnswer, kind: &problem.InProgress, detail: detailInFlight},
		{name: "client gone: nothing written", s: waitState{err: context.Canceled, clientGone: true, own: true},
			step: stepClientGone},
		{name: "store failed", s: waitState{err: store.ErrUnavailable},
			step: stepStoreFailed, op: "wait"},
		{name: "store failed as the client left: the store failure", s: waitState{err: fmt.Errorf("get: %w", store.ErrUnavailable), clientGone: true},
			step: stepStoreFailed, op: "wait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.s.retry = 3
			a := decideWait(c.s)
			if a.step != c.step {
				t.Fatalf("step = %v, want %v", a.step, c.step)
			}
			if a.release != keepClaim || a.takeover {
				t.Fatalf("release %v, takeover %v: a wait holds no claim", a.release, a.takeover)
			}
			if a.record != c.record {
				t.Fatalf("record = %v, want %v", a.record, c.record)
			}
			if a.op != c.op {
				t.Fatalf("op = %q, want %q", a.op, c.op)
			}
			if c.kind == nil {
				if a.problem.Status != 0 {
					t.Fatalf("answers %d, want no problem", a.problem.Status)
				}
				return
			}
			if a.problem.Type != c.kind.Type() || a.problem.Detail != c.detail || a.problem.RetryAfter != 3 {
				t.Fatalf("problem = %s %q Retry-After %d, want %s %q 3", a.problem.Type, a.problem.Detail, a.problem.RetryAfter, c.kind.Slug, c.detail)
			}
		})
	}
	if got := clientStatus(&http.Request{Method: "POST"}, &exchange{status: statusClientClosed}); got != 499 {
		t.Fatalf("a client that left is logged as %d, want 499", got)
	}
}
