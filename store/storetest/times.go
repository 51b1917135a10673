package storetest

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func (s *suite) testRetentionEnd(t *testing.T) {
	st := s.newStore(t)
	retention := shortRetention
	id := newID()
	p := params(id, "fp", longLease, retention)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	r := s.mustGet(t, st, id)
	if r == nil || r.State != store.Completed {
		t.Fatalf("Get right after Complete = %+v, want completed", r)
	}
	if want := r.Response.StoredAt.Add(retention); !r.RetentionEnd.Equal(want) {
		t.Fatalf("RetentionEnd = %v, want StoredAt+retention = %v", r.RetentionEnd, want)
	}
	s.elapse(retention)
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get past retention end = %+v, want nil", r)
	}
	s.mustBool(t, "Complete past retention", complete(st, id, p.Token, sampleResponse()), false)
	s.mustBool(t, "Extend past retention", extend(st, id, p.Token, longLease), false)
	s.mustBool(t, "Release past retention", release(st, id, p.Token), false)
	s.mustBool(t, "Delete past retention", del(st, id), false)
	res := s.mustClaim(t, st, params(id, "other-fp", longLease, time.Hour), store.Claimed)
	if res.Takeover {
		t.Fatal("Claim past retention answered Takeover, want a fresh claim")
	}
}

func (s *suite) testRunningExpiry(t *testing.T) {
	st := s.newStore(t)
	// A running record lives until the later of lease end and claim+retention.
	lease, retention := shortLease, shortRetention
	id := newID()
	p := params(id, "fp", lease, retention)
	res := s.mustClaim(t, st, p, store.Claimed)
	r := s.mustGet(t, st, id)
	if r == nil || !r.RetentionEnd.Equal(r.CreatedAt.Add(retention)) {
		t.Fatalf("running record = %+v, want RetentionEnd = CreatedAt+retention", r)
	}
	if r.RetentionEnd.Before(res.LeaseEnd) {
		t.Fatalf("RetentionEnd %v before LeaseEnd %v", r.RetentionEnd, res.LeaseEnd)
	}
	s.elapse(retention)
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get past running record's end = %+v, want nil", r)
	}
	s.mustBool(t, "Complete past end", complete(st, id, p.Token, sampleResponse()), false)
	s.mustBool(t, "Extend past end", extend(st, id, p.Token, longLease), false)
	s.mustBool(t, "Release past end", release(st, id, p.Token), false)
	s.mustBool(t, "Delete past end", del(st, id), false)
	// A different fingerprint claims it: the record is absent, not abandoned.
	res = s.mustClaim(t, st, params(id, "other-fp", longLease, time.Hour), store.Claimed)
	if res.Takeover {
		t.Fatal("Claim past running record's end answered Takeover, want a fresh claim")
	}
}

func (s *suite) testExactBoundary(t *testing.T) {
	if s.clock == nil {
		t.Skip("storetest: the exact end <= now boundary needs an injected clock (Harness.Clock)")
	}
	st := s.newStore(t)
	c := s.clock
	lease, retention := time.Second, 5*time.Second
	id := newID()
	p := params(id, "fp", lease, retention)
	s.mustClaim(t, st, p, store.Claimed)
	c.Advance(lease - time.Millisecond)
	s.mustClaim(t, st, params(id, "fp", lease, retention), store.Running) // end > now: valid
	c.Advance(time.Millisecond)
	// end == now: the lease is over.
	s.mustClaim(t, st, params(id, "other", lease, retention), store.Abandoned)
	if r := s.mustGet(t, st, id); r == nil || r.State != store.Abandoned {
		t.Fatalf("Get at lease end = %+v, want abandoned", r)
	}
	q := params(id, "fp", lease, retention)
	if res := s.mustClaim(t, st, q, store.Claimed); !res.Takeover {
		t.Fatal("Claim at lease end with same fingerprint: want Takeover")
	}
	s.mustBool(t, "Complete", complete(st, id, q.Token, sampleResponse()), true)
	c.Advance(retention - time.Millisecond)
	if r := s.mustGet(t, st, id); r == nil || r.State != store.Completed {
		t.Fatalf("Get 1ms before retention end = %+v, want completed", r)
	}
	c.Advance(time.Millisecond)
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get at retention end = %+v, want nil", r)
	}
	// Running record end, same boundary.
	id2 := newID()
	s.mustClaim(t, st, params(id2, "fp", lease, retention), store.Claimed)
	c.Advance(retention - time.Millisecond)
	s.mustClaim(t, st, params(id2, "other", lease, retention), store.Abandoned)
	c.Advance(time.Millisecond)
	s.mustClaim(t, st, params(id2, "other", lease, retention), store.Claimed)
}

func (s *suite) testOneClock(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	retention := time.Hour
	var now time.Time
	if s.clock != nil {
		now = s.clock.Now().Truncate(time.Millisecond)
	}
	p := params(id, "fp", 1500*time.Millisecond, retention)
	res := s.mustClaim(t, st, p, store.Claimed)
	r := s.mustGet(t, st, id)
	if !r.CreatedAt.Equal(r.CreatedAt.Truncate(time.Millisecond)) || !res.LeaseEnd.Equal(r.CreatedAt.Add(p.Lease)) {
		t.Fatalf("CreatedAt %v LeaseEnd %v: want ms resolution and LeaseEnd = CreatedAt+lease", r.CreatedAt, res.LeaseEnd)
	}
	if s.clock != nil && !r.CreatedAt.Equal(now) {
		t.Fatalf("CreatedAt = %v, want the store clock's %v", r.CreatedAt, now)
	}
	s.mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	r = s.mustGet(t, st, id)
	if r.Response.StoredAt.Before(r.CreatedAt) || !r.RetentionEnd.Equal(r.Response.StoredAt.Add(retention)) {
		t.Fatalf("StoredAt %v CreatedAt %v RetentionEnd %v: want StoredAt >= CreatedAt, RetentionEnd = StoredAt+retention", r.Response.StoredAt, r.CreatedAt, r.RetentionEnd)
	}
	if s.clock != nil && !r.Response.StoredAt.Equal(now) {
		t.Fatalf("StoredAt = %v, want the store clock's %v", r.Response.StoredAt, now)
	}
}

func (s *suite) testRetentionZero(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", shortLease, 0)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	r := s.mustGet(t, st, id)
	if r == nil || r.State != store.Completed || !r.RetentionEnd.IsZero() {
		t.Fatalf("completed record with retention 0 = %+v, want RetentionEnd zero (never)", r)
	}
	if s.clock != nil {
		s.clock.Advance(100 * 365 * 24 * time.Hour)
	} else {
		s.elapse(2 * shortLease)
	}
	if r := s.mustGet(t, st, id); r == nil || r.State != store.Completed {
		t.Fatalf("completed record with retention 0 after a long time = %+v, want kept", r)
	}
	s.mustClaim(t, st, params(id, "fp", longLease, 0), store.Completed)
}

func (s *suite) testRunningAlwaysExpires(t *testing.T) {
	st := s.newStore(t)
	for _, retention := range []time.Duration{0, time.Millisecond, time.Hour} {
		id := newID()
		p := params(id, "fp", longLease, retention)
		res := s.mustClaim(t, st, p, store.Claimed)
		check := func(when string) {
			t.Helper()
			r := s.mustGet(t, st, id)
			if r == nil || r.RetentionEnd.IsZero() || r.RetentionEnd.Before(r.LeaseEnd) {
				t.Fatalf("retention %v, %s: running record %+v must expire, not before its lease end", retention, when, r)
			}
			if retention == 0 && !r.RetentionEnd.Equal(r.LeaseEnd.Add(store.AbandonedKeep)) {
				t.Fatalf("retention 0, %s: RetentionEnd = %v, want lease end + store.AbandonedKeep = %v", when, r.RetentionEnd, r.LeaseEnd.Add(store.AbandonedKeep))
			}
		}
		check("after Claim")
		s.mustBool(t, "Extend", extend(st, id, p.Token, 2*longLease), true)
		check("after Extend")
		if r := s.mustGet(t, st, id); !r.LeaseEnd.After(res.LeaseEnd) {
			t.Fatalf("Extend did not move the lease end: %v -> %v", res.LeaseEnd, r.LeaseEnd)
		}
	}
	if s.clock != nil {
		// A crashed holder's record with retention 0 is gone a day after its lease.
		id := newID()
		s.mustClaim(t, st, params(id, "fp", time.Second, 0), store.Claimed)
		s.clock.Advance(time.Second + store.AbandonedKeep)
		if r := s.mustGet(t, st, id); r != nil {
			t.Fatalf("abandoned record with retention 0 a day past its lease = %+v, want nil", r)
		}
	}
}
