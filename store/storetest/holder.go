package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func (s *suite) testStaleToken(t *testing.T) {
	st := s.newStore(t)
	t.Run("wrong token", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		s.mustClaim(t, st, p, store.Claimed)
		before := s.mustGet(t, st, id)
		s.mustBool(t, "Complete wrong token", complete(st, id, "not-"+p.Token, sampleResponse()), false)
		s.mustBool(t, "Release wrong token", release(st, id, "not-"+p.Token), false)
		s.mustBool(t, "Extend wrong token", extend(st, id, "not-"+p.Token, 2*longLease), false)
		s.mustBool(t, "Complete empty token", complete(st, id, "", sampleResponse()), false)
		after := s.mustGet(t, st, id)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("record changed by wrong-token calls:\nbefore %+v\nafter  %+v", before, after)
		}
	})
	t.Run("after completion", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		s.mustClaim(t, st, p, store.Claimed)
		resp := sampleResponse()
		s.mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
		before := s.mustGet(t, st, id)
		if before.Token != "" || !before.LeaseEnd.IsZero() {
			t.Fatalf("completed record = %+v, want no token and zero lease end", before)
		}
		other := store.Response{Status: 500, Body: []byte("other")}
		s.mustBool(t, "second Complete", complete(st, id, p.Token, other), false)
		s.mustBool(t, "Release of completed", release(st, id, p.Token), false)
		s.mustBool(t, "Extend of completed", extend(st, id, p.Token, longLease), false)
		s.mustBool(t, "Release with empty token", release(st, id, ""), false)
		after := s.mustGet(t, st, id)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("completed record changed:\nbefore %+v\nafter  %+v", before, after)
		}
		sameResponse(t, "completed record", after.Response, resp)
	})
	t.Run("after takeover", func(t *testing.T) {
		id := newID()
		a := params(id, "fp", shortLease, time.Hour)
		s.mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		b := params(id, "fp", longLease, time.Hour)
		if res := s.mustClaim(t, st, b, store.Claimed); !res.Takeover {
			t.Fatalf("takeover claim = %+v, want Takeover", res)
		}
		before := s.mustGet(t, st, id)
		s.mustBool(t, "Complete by old holder", complete(st, id, a.Token, sampleResponse()), false)
		s.mustBool(t, "Extend by old holder", extend(st, id, a.Token, longLease), false)
		s.mustBool(t, "Release by old holder", release(st, id, a.Token), false)
		after := s.mustGet(t, st, id)
		if !reflect.DeepEqual(before, after) || after.Token != b.Token {
			t.Fatalf("record changed by old holder:\nbefore %+v\nafter  %+v", before, after)
		}
		s.mustBool(t, "Complete by new holder", complete(st, id, b.Token, sampleResponse()), true)
	})
	t.Run("after release", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		s.mustClaim(t, st, p, store.Claimed)
		s.mustBool(t, "Release", release(st, id, p.Token), true)
		s.mustBool(t, "second Release", release(st, id, p.Token), false)
		s.mustBool(t, "Complete after Release", complete(st, id, p.Token, sampleResponse()), false)
		s.mustBool(t, "Extend after Release", extend(st, id, p.Token, longLease), false)
		if r := s.mustGet(t, st, id); r != nil {
			t.Fatalf("Get after Release = %+v, want nil", r)
		}
		if res := s.mustClaim(t, st, params(id, "other", longLease, time.Hour), store.Claimed); res.Takeover {
			t.Fatal("Claim after Release answered Takeover")
		}
	})
}

func (s *suite) testTakeover(t *testing.T) {
	st := s.newStore(t)
	t.Run("same fingerprint", func(t *testing.T) {
		id := newID()
		a := params(id, "fp", shortLease, time.Hour)
		s.mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		if r := s.mustGet(t, st, id); r == nil || r.State != store.Abandoned || r.Token != a.Token {
			t.Fatalf("Get past lease = %+v, want abandoned holding the first token", r)
		}
		b := params(id, "fp", longLease, time.Hour)
		res := s.mustClaim(t, st, b, store.Claimed)
		if !res.Takeover || res.Fingerprint != "fp" {
			t.Fatalf("Claim past lease = %+v, want Claimed with Takeover", res)
		}
		if r := s.mustGet(t, st, id); r == nil || r.State != store.Running || r.Token != b.Token {
			t.Fatalf("Get after takeover = %+v, want running with the new token", r)
		}
		// The retried takeover claim keeps answering the same (its lease
		// restarted, see RepeatedClaimRefreshesLease).
		if again := s.mustClaim(t, st, b, store.Claimed); !again.Takeover || again.LeaseEnd.Before(res.LeaseEnd) {
			t.Fatalf("repeated takeover claim = %+v, want %+v", again, res)
		}
	})
	t.Run("different fingerprint never", func(t *testing.T) {
		id := newID()
		a := params(id, "fp-a", shortLease, time.Hour)
		claimed := s.mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		for range 3 {
			res := s.mustClaim(t, st, params(id, "fp-b", longLease, time.Hour), store.Abandoned)
			if res.Fingerprint != "fp-a" || res.Takeover || !res.LeaseEnd.Equal(claimed.LeaseEnd) {
				t.Fatalf("Claim with other fingerprint = %+v, want Abandoned with fp-a", res)
			}
			s.elapse(shortLease)
		}
		if r := s.mustGet(t, st, id); r == nil || r.Token != a.Token {
			t.Fatalf("record = %+v, want still held by the first token", r)
		}
	})
	t.Run("NoTakeover", func(t *testing.T) {
		id := newID()
		a := params(id, "fp", shortLease, time.Hour)
		s.mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		b := params(id, "fp", longLease, time.Hour)
		b.NoTakeover = true
		res := s.mustClaim(t, st, b, store.Abandoned)
		if res.Fingerprint != "fp" || res.Takeover {
			t.Fatalf("NoTakeover claim = %+v, want Abandoned", res)
		}
		if r := s.mustGet(t, st, id); r == nil || r.Token != a.Token {
			t.Fatalf("record = %+v, want still held by the first token", r)
		}
	})
}

func (s *suite) testHolderPastLease(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", shortLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	s.elapse(shortLease)
	s.mustBool(t, "Extend past lease, not taken over", extend(st, id, p.Token, longLease), true)
	s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Running)
	id2 := newID()
	p2 := params(id2, "fp", shortLease, time.Hour)
	s.mustClaim(t, st, p2, store.Claimed)
	s.elapse(shortLease)
	s.mustBool(t, "Complete past lease, not taken over", complete(st, id2, p2.Token, sampleResponse()), true)
	s.mustClaim(t, st, params(id2, "fp", longLease, time.Hour), store.Completed)
}

func (s *suite) testExtend(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	if c := s.clock; c != nil {
		lease := time.Second
		p := params(id, "fp", lease, time.Hour)
		s.mustClaim(t, st, p, store.Claimed)
		c.Advance(lease - time.Millisecond)
		extendedAt := c.Now().Truncate(time.Millisecond)
		s.mustBool(t, "Extend", extend(st, id, p.Token, lease), true)
		c.Advance(2 * time.Millisecond) // past the original lease end
		res := s.mustClaim(t, st, params(id, "fp", lease, time.Hour), store.Running)
		if want := extendedAt.Add(lease); !res.LeaseEnd.Equal(want) {
			t.Fatalf("LeaseEnd after Extend = %v, want %v", res.LeaseEnd, want)
		}
		return
	}
	// Real clock: extend every 200ms with a 1s lease for twice the lease;
	// a same-fingerprint claim right after each Extend must stay Running.
	// The lease leaves room for a loaded machine running the subtests in
	// parallel: the Claim must come within a lease of the Extend.
	lease := time.Second
	p := params(id, "fp", lease, time.Hour)
	first := s.mustClaim(t, st, p, store.Claimed)
	for time.Until(first.LeaseEnd) > -lease {
		time.Sleep(lease / 5)
		s.mustBool(t, "Extend", extend(st, id, p.Token, lease), true)
		res := s.mustClaim(t, st, params(id, "fp", lease, time.Hour), store.Running)
		if !res.LeaseEnd.After(first.LeaseEnd) && time.Now().After(first.LeaseEnd) {
			t.Fatalf("LeaseEnd %v not moved past the original %v", res.LeaseEnd, first.LeaseEnd)
		}
	}
	if r := s.mustGet(t, st, id); r == nil || r.Token != p.Token || r.State != store.Running {
		t.Fatalf("record = %+v, want still running with the extending token", r)
	}
}
