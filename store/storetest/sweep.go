package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// testSweep checks the optional store.Sweeper: a sweep removes exactly the
// records past their retention end (completed past retention, running past
// claim time + retention, a crashed claim with retention 0 a day after its
// lease) and keeps the rest, and a done context fails it with
// store.ErrUnavailable. Stores that are not Sweepers skip it.
func (s *suite) testSweep(t *testing.T) {
	st := s.newStore(t)
	sw, ok := st.(store.Sweeper)
	if !ok {
		t.Skip("storetest: store is not a store.Sweeper")
	}
	sweep := func(when string, want int) {
		t.Helper()
		if n, err := sw.Sweep(s.ctx(t)); err != nil || n != want {
			t.Fatalf("Sweep %s = %d, %v; want %d removed", when, n, err, want)
		}
	}
	// Long enough for every write below to land before the first record
	// expires, even on a loaded machine with a real clock.
	retention := time.Second
	var expiring []store.Identity
	for i := range 6 {
		id := newID()
		p := params(id, "fp", shortLease, retention)
		s.mustClaim(t, st, p, store.Claimed)
		if i%2 == 0 {
			s.mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
		}
		expiring = append(expiring, id)
	}
	forever, abandoned, live := newID(), newID(), newID()
	p := params(forever, "fp", shortLease, 0)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustBool(t, "Complete", complete(st, forever, p.Token, sampleResponse()), true)
	s.mustClaim(t, st, params(abandoned, "fp", shortLease, 0), store.Claimed)
	s.mustClaim(t, st, params(live, "fp", longLease, time.Hour), store.Claimed)
	sweep("before anything expired", 0)
	s.elapse(retention)
	sweep("past the retention end", len(expiring))
	for _, id := range expiring {
		if r := s.mustGet(t, st, id); r != nil {
			t.Fatalf("Get of a swept record = %+v, want nil", r)
		}
	}
	for id, want := range map[store.Identity]store.State{forever: store.Completed, abandoned: store.Abandoned, live: store.Running} {
		if r := s.mustGet(t, st, id); r == nil || r.State != want {
			t.Fatalf("Get after Sweep = %+v, want a kept %v record", r, want)
		}
	}
	if s.clock != nil {
		// A day later the crashed claim with retention 0 and the running
		// record past claim time + retention go; retention 0 stays.
		s.clock.Advance(store.AbandonedKeep)
		sweep("a day later", 2)
		if r := s.mustGet(t, st, forever); r == nil || r.State != store.Completed {
			t.Fatalf("completed record with retention 0 after Sweep = %+v, want kept", r)
		}
	}
	done, cancel := context.WithCancel(s.background())
	cancel()
	if _, err := sw.Sweep(done); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with a canceled context: err = %v, want it to wrap ErrUnavailable and context.Canceled", err)
	}
}
