package storetest

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wakeTimeout):
		t.Fatalf("%s: watcher not woken within %v", what, wakeTimeout)
	}
}

func (s *suite) testWatch(t *testing.T, by string, peer bool) {
	st := s.newStore(t)
	watcherStore, actor := st, st
	if peer {
		actor = s.peer(t, st)
	}
	id := newID()
	ch1, stop1 := watcherStore.Watch(id)
	defer stop1()
	ch2, stop2 := watcherStore.Watch(id)
	defer stop2()
	p := params(id, "fp", longLease, time.Hour)
	s.mustClaim(t, actor, p, store.Claimed)
	switch by {
	case "complete":
		s.mustBool(t, "Complete", complete(actor, id, p.Token, sampleResponse()), true)
	case "release":
		s.mustBool(t, "Release", release(actor, id, p.Token), true)
	case "delete":
		s.mustBool(t, "Delete", del(actor, id), true)
	}
	waitClosed(t, ch1, by)
	waitClosed(t, ch2, by+" (second watcher)")
}

func (s *suite) testWatchOthers(t *testing.T) {
	st := s.newStore(t)
	watched, other := newID(), newID()
	// Same owner and route, other key: must not wake.
	other.Owner, other.Scope = watched.Owner, watched.Scope
	p := params(watched, "fp", longLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	ch, stop := st.Watch(watched)
	defer stop()
	for _, by := range []string{"complete", "release", "delete"} {
		q := params(other, "fp", longLease, time.Hour)
		s.mustClaim(t, st, q, store.Claimed)
		switch by {
		case "complete":
			s.mustBool(t, "Complete other", complete(st, other, q.Token, sampleResponse()), true)
			s.mustBool(t, "Delete other", del(st, other), true)
		case "release":
			s.mustBool(t, "Release other", release(st, other, q.Token), true)
		case "delete":
			s.mustBool(t, "Delete other", del(st, other), true)
		}
	}
	// Changes to the watched record that are not completion, release or
	// deletion do not wake it either.
	s.mustBool(t, "Extend watched", extend(st, watched, p.Token, longLease), true)
	s.mustClaim(t, st, params(watched, "fp", longLease, time.Hour), store.Running)
	select {
	case <-ch:
		t.Fatalf("watcher woken by changes to another identity")
	case <-time.After(quietWindow):
	}
	s.mustBool(t, "Complete watched", complete(st, watched, p.Token, sampleResponse()), true)
	waitClosed(t, ch, "complete of the watched identity")
}

func (s *suite) testWatchStop(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	ch, stop := st.Watch(id)
	stop()
	stop() // idempotent
	live, stopLive := st.Watch(id)
	defer stopLive()
	p := params(id, "fp", longLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustBool(t, "Release", release(st, id, p.Token), true)
	waitClosed(t, live, "release")
	select {
	case <-ch:
		// A stopped watcher may or may not be closed; it must just not panic.
	default:
	}
}
