package storetest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// created claims and completes a fresh record of id with a 201 naming
// path in Location, and indexes it there.
func (s *suite) created(t *testing.T, st store.Store, id store.Identity, path string, retention time.Duration) {
	t.Helper()
	p := params(id, "fp-create", longLease, retention)
	p.Recipe = "recipe"
	s.mustClaim(t, st, p, store.Claimed)
	resp := store.Response{Status: http.StatusCreated, Header: http.Header{"Location": {path}}, Body: []byte(`{"id":1}`)}
	s.mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
	if err := st.Index(s.ctx(t), path, id); err != nil {
		t.Fatalf("Index(%q): %v", path, err)
	}
}

func (s *suite) mustTombstone(t *testing.T, st store.Store, res store.Resource, want int) {
	t.Helper()
	n, err := st.Tombstone(s.ctx(t), res)
	if err != nil {
		t.Fatalf("Tombstone(%+v): %v", res, err)
	}
	if n != want {
		t.Fatalf("Tombstone(%+v) = %d, want %d", res, n, want)
	}
}

// testTombstone checks contract rules 9, 11 and 12: a tombstoned record
// answers Gone to any claim (whatever its fingerprint) and to Get, keeps
// its retention end but no fingerprint, recipe or response, is not acted
// on by an old token, and a second Tombstone turns nothing.
func (s *suite) testTombstone(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	path := "/v1/orders/" + random(4)
	s.created(t, st, id, path, time.Hour)
	before := s.mustGet(t, st, id)
	res := store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path}
	s.mustTombstone(t, st, res, 1)

	for _, fp := range []string{"fp-create", "fp-other"} {
		got := s.mustClaim(t, st, params(id, fp, longLease, time.Hour), store.Gone)
		if got.Response != nil || got.Fingerprint != "" || got.Recipe != "" {
			t.Fatalf("Claim of a tombstone = %+v, want nothing but the state", got)
		}
	}
	r := s.mustGet(t, st, id)
	if r == nil || r.State != store.Gone || r.Response != nil || r.Fingerprint != "" || r.Recipe != "" || r.Token != "" {
		t.Fatalf("Get of a tombstone = %+v", r)
	}
	if r.Identity != id {
		t.Fatalf("tombstone identity = %+v, want %+v", r.Identity, id)
	}
	if !r.RetentionEnd.Equal(before.RetentionEnd) {
		t.Fatalf("tombstone retention end = %v, want the record's %v", r.RetentionEnd, before.RetentionEnd)
	}
	s.mustBool(t, "Complete on a tombstone", complete(st, id, "tok-any", sampleResponse()), false)
	s.mustBool(t, "Release on a tombstone", release(st, id, "tok-any"), false)
	s.mustBool(t, "Extend on a tombstone", extend(st, id, "tok-any", longLease), false)

	// Idempotent: again, and after indexing the tombstone, nothing more.
	s.mustTombstone(t, st, res, 0)
	if err := st.Index(s.ctx(t), path, id); err != nil {
		t.Fatalf("Index of a tombstone: %v", err)
	}
	s.mustTombstone(t, st, res, 0)
	s.mustClaim(t, st, params(id, "fp-create", longLease, time.Hour), store.Gone)

	// An operator purge removes it like any record.
	s.mustBool(t, "Delete of a tombstone", del(st, id), true)
	s.mustClaim(t, st, params(id, "fp-create", longLease, time.Hour), store.Claimed)
}

// testTombstoneIsolation checks rule 3: only the records of the resource's
// owner, scope and path are tombstoned; several records of one owner at
// one path all are.
func (s *suite) testTombstoneIsolation(t *testing.T) {
	st := s.newStore(t)
	path := "/v1/orders/" + random(4)
	a1, a2 := newID(), newID()
	a2.Owner = a1.Owner
	otherOwner := newID()
	otherScope := store.Identity{Owner: a1.Owner, Scope: "payments", Key: "key-" + random(8)}
	otherPath := store.Identity{Owner: a1.Owner, Scope: a1.Scope, Key: "key-" + random(8)}
	for _, id := range []store.Identity{a1, a2, otherOwner, otherScope} {
		s.created(t, st, id, path, time.Hour)
	}
	s.created(t, st, otherPath, path+"/items", time.Hour)
	s.mustTombstone(t, st, store.Resource{Owner: a1.Owner, Scope: a1.Scope, Path: "/v1/never-indexed"}, 0)
	s.mustTombstone(t, st, store.Resource{Owner: a1.Owner, Scope: a1.Scope, Path: path}, 2)
	for _, id := range []store.Identity{a1, a2} {
		s.mustClaim(t, st, params(id, "fp-create", longLease, time.Hour), store.Gone)
	}
	for _, id := range []store.Identity{otherOwner, otherScope, otherPath} {
		got := s.mustClaim(t, st, params(id, "fp-create", longLease, time.Hour), store.Completed)
		if got.Response == nil || got.Response.Status != http.StatusCreated {
			t.Fatalf("untouched record of %+v = %+v", id, got)
		}
	}
}

// testTombstoneNotIndexed checks rule 1: indexing an absent or running
// record does nothing, and an index entry never tombstones a later record
// of the same identity (claimed again after a purge).
func (s *suite) testTombstoneNotIndexed(t *testing.T) {
	st := s.newStore(t)
	path := "/v1/orders/" + random(4)
	absent, running, reborn := newID(), newID(), newID()
	running.Owner, reborn.Owner = absent.Owner, absent.Owner
	if err := st.Index(s.ctx(t), path, absent); err != nil {
		t.Fatalf("Index of an absent record: %v", err)
	}
	s.mustClaim(t, st, params(running, "fp", longLease, time.Hour), store.Claimed)
	if err := st.Index(s.ctx(t), path, running); err != nil {
		t.Fatalf("Index of a running record: %v", err)
	}
	s.created(t, st, reborn, path, time.Hour)
	s.mustBool(t, "Delete", del(st, reborn), true)
	// A later completion of the same identity: a later StoredAt.
	s.elapse(5 * time.Millisecond)
	p := params(reborn, "fp-second", longLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustBool(t, "Complete", complete(st, reborn, p.Token, sampleResponse()), true)

	s.mustTombstone(t, st, store.Resource{Owner: absent.Owner, Scope: absent.Scope, Path: path}, 0)
	s.mustClaim(t, st, params(absent, "fp", longLease, time.Hour), store.Claimed)
	s.mustClaim(t, st, params(running, "fp", longLease, time.Hour), store.Running)
	s.mustClaim(t, st, params(reborn, "fp-second", longLease, time.Hour), store.Completed)
}

// testTombstoneExpires checks rules 2 and 3: a tombstone ends with its
// record's retention, and then the key is free.
func (s *suite) testTombstoneExpires(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	path := "/v1/orders/" + random(4)
	retention := shortRetention
	s.created(t, st, id, path, retention)
	s.mustTombstone(t, st, store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path}, 1)
	s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Gone)
	s.elapse(retention)
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get past the tombstone's retention end = %+v, want absent", r)
	}
	s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Claimed)
	s.mustTombstone(t, st, store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path}, 0)
}

// testTombstonePeer checks that a tombstone made by one instance is seen
// by another sharing the backing server.
func (s *suite) testTombstonePeer(t *testing.T) {
	st := s.newStore(t)
	peer := s.peer(t, st)
	id := newID()
	path := "/v1/orders/" + random(4)
	s.created(t, st, id, path, time.Hour)
	s.mustTombstone(t, peer, store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path}, 1)
	s.mustClaim(t, st, params(id, "fp-create", longLease, time.Hour), store.Gone)
}

// testTombstoneDoneContext checks rule 5.
func (s *suite) testTombstoneDoneContext(t *testing.T) {
	st := s.newStore(t)
	ctx, cancel := context.WithCancel(s.background())
	cancel()
	id := newID()
	if err := st.Index(ctx, "/x", id); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Index with a done ctx = %v, want ErrUnavailable and context.Canceled", err)
	}
	if _, err := st.Tombstone(ctx, store.Resource{Owner: id.Owner, Scope: id.Scope, Path: "/x"}); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Tombstone with a done ctx = %v, want ErrUnavailable and context.Canceled", err)
	}
}
