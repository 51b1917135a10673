package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func (s *suite) testClaimFree(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp-1", longLease, time.Hour)
	var before time.Time
	if s.clock != nil {
		before = s.clock.Now().Truncate(time.Millisecond)
	}
	res := s.mustClaim(t, st, p, store.Claimed)
	if res.Takeover || res.Fingerprint != p.Fingerprint || res.Response != nil {
		t.Fatalf("Claim = %+v, want no takeover, the caller's fingerprint, no response", res)
	}
	if s.clock != nil && !res.LeaseEnd.Equal(before.Add(longLease)) {
		t.Fatalf("LeaseEnd = %v, want now+lease = %v", res.LeaseEnd, before.Add(longLease))
	}
	r := s.mustGet(t, st, id)
	if r == nil {
		t.Fatal("Get after Claim = nil")
	}
	if r.State != store.Running || r.Token != p.Token || r.Fingerprint != p.Fingerprint || r.Identity != id || r.Response != nil {
		t.Fatalf("Get = %+v, want running record holding the claim", r)
	}
	if !r.LeaseEnd.Equal(res.LeaseEnd) || !r.LeaseEnd.Equal(r.CreatedAt.Add(longLease)) {
		t.Fatalf("Get LeaseEnd = %v CreatedAt = %v, want LeaseEnd = Claim's %v = CreatedAt+lease", r.LeaseEnd, r.CreatedAt, res.LeaseEnd)
	}
}

func (s *suite) testConcurrentClaims(t *testing.T) {
	st := s.newStore(t)
	// With a second instance, half the claimers race through it: exclusion
	// must hold between processes, not only within one.
	stores := []store.Store{st}
	if s.h.NewPeer != nil {
		peer := s.h.NewPeer(t, st, s.clock)
		t.Cleanup(func() { _ = peer.Close() })
		stores = append(stores, peer)
	}
	const rounds, n = 20, 64
	for round := range rounds {
		id := newID()
		results := make([]store.ClaimResult, n)
		errs := make([]error, n)
		tokens := make([]string, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			tokens[i] = newToken()
			wg.Go(func() {
				<-start
				results[i], errs[i] = stores[i%len(stores)].Claim(s.ctx(t), store.ClaimParams{
					Identity: id, Fingerprint: fmt.Sprintf("fp-%d", i), Token: tokens[i],
					Lease: longLease, Retention: time.Hour,
				})
			})
		}
		began := time.Now()
		close(start)
		wg.Wait()
		took := time.Since(began)
		winner := -1
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: Claim %d: %v", round, i, errs[i])
			}
			if results[i].State == store.Claimed {
				if winner >= 0 {
					t.Fatalf("round %d: claims %d and %d both answered Claimed", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no claim answered Claimed", round)
		}
		wantFP := fmt.Sprintf("fp-%d", winner)
		for i := range n {
			if i == winner {
				continue
			}
			// On a real clock a Running answer may be read before the
			// winner's claim restarted its lease (a repeated claim, which
			// Valkey's layouts 4 and 5 run for a slow fresh claim): its lease
			// end is then that of the moment, within the round (and the
			// millisecond truncation and the error of Valkey's bound of its
			// clock) of the winner's.
			leaseEnd, want := results[i].LeaseEnd, results[winner].LeaseEnd
			off := leaseEnd.Sub(want).Abs()
			if results[i].State != store.Running || results[i].Fingerprint != wantFP || leaseEnd.IsZero() ||
				(s.clock != nil && off != 0) || off > took+10*time.Millisecond {
				t.Fatalf("round %d: claim %d = %+v, want Running with the winner's fingerprint %q and lease end %v", round, i, results[i], wantFP, want)
			}
		}
		if r := s.mustGet(t, st, id); r == nil || r.Token != tokens[winner] {
			t.Fatalf("round %d: record = %+v, want it held by the winner's token", round, r)
		}
	}
}

func (s *suite) testRunningAndCompleted(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	first := s.mustClaim(t, st, params(id, "fp-a", longLease, time.Hour), store.Claimed)
	for _, fp := range []string{"fp-a", "fp-b"} {
		p := params(id, fp, longLease, time.Hour)
		p.NoTakeover = fp == "fp-b"
		res := s.mustClaim(t, st, p, store.Running)
		if res.Fingerprint != "fp-a" || !res.LeaseEnd.Equal(first.LeaseEnd) || res.Takeover || res.Response != nil {
			t.Fatalf("Claim(%s) on running record = %+v, want Running fp-a lease end %v", fp, res, first.LeaseEnd)
		}
	}
	// Complete with the holder's token; every later claim answers Completed.
	rec := s.mustGet(t, st, id)
	resp := sampleResponse()
	s.mustBool(t, "Complete by holder", complete(st, id, rec.Token, resp), true)
	for _, fp := range []string{"fp-a", "fp-other"} {
		res := s.mustClaim(t, st, params(id, fp, longLease, time.Hour), store.Completed)
		if res.Fingerprint != "fp-a" || res.Takeover {
			t.Fatalf("Claim(%s) on completed record = %+v, want fingerprint fp-a", fp, res)
		}
		sameResponse(t, "Claim on completed record", res.Response, resp)
	}
}

func (s *suite) testRepeatedClaimSameToken(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", longLease, time.Hour)
	first := s.mustClaim(t, st, p, store.Claimed)
	// A claim retried after its reply was lost must not answer Running to
	// the claimer itself.
	again := s.mustClaim(t, st, p, store.Claimed)
	// Its lease restarts (RepeatedClaimRefreshesLease); on an injected clock
	// no time passed.
	if again.LeaseEnd.Before(first.LeaseEnd) || (s.clock != nil && !again.LeaseEnd.Equal(first.LeaseEnd)) ||
		again.Fingerprint != "fp" || again.Takeover {
		t.Fatalf("repeated Claim = %+v, want the first claim's answer %+v", again, first)
	}
}

// testRepeatedClaimRefreshesLease: a claim repeated with the token holding
// the record (a client retrying a claim whose reply was lost) holds it for a
// whole lease from now, as a fresh claim would, even near or past the first
// lease's end, so no other claimer takes over a claim that was just
// confirmed to its holder. The record's expiry is moved like a fresh
// claim's, never earlier.
func (s *suite) testRepeatedClaimRefreshesLease(t *testing.T) {
	st := s.newStore(t)
	if c := s.clock; c != nil {
		lease := time.Second
		for _, tc := range []struct {
			name      string
			wait      time.Duration
			retention time.Duration
		}{
			{"near the lease end", lease - time.Millisecond, time.Hour},
			{"at the lease end", lease, time.Hour},
			{"past the lease end", lease + lease/2, 2 * lease},
			{"retention 0", 2 * lease, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id := newID()
				p := params(id, "fp", lease, tc.retention)
				s.mustClaim(t, st, p, store.Claimed)
				c.Advance(tc.wait)
				now := c.Now().Truncate(time.Millisecond)
				before := s.mustGet(t, st, id)
				if before == nil {
					t.Fatal("Get before the repeated Claim = nil, want the running record")
				}
				again := s.mustClaim(t, st, p, store.Claimed)
				if again.Takeover || again.Fingerprint != "fp" || !again.LeaseEnd.Equal(now.Add(lease)) {
					t.Fatalf("repeated Claim = %+v, want Claimed without takeover, lease end now+lease = %v", again, now.Add(lease))
				}
				wantEnd := now.Add(max(lease, tc.retention))
				if tc.retention == 0 {
					wantEnd = again.LeaseEnd.Add(store.AbandonedKeep)
				}
				wantEnd = latest(wantEnd, before.RetentionEnd)
				r := s.mustGet(t, st, id)
				if r == nil || r.State != store.Running || r.Token != p.Token || !r.LeaseEnd.Equal(again.LeaseEnd) || !r.RetentionEnd.Equal(wantEnd) {
					t.Fatalf("record after the repeated Claim = %+v, want running, held by %q, lease end %v, expiry %v", r, p.Token, again.LeaseEnd, wantEnd)
				}
				c.Advance(lease - time.Millisecond)
				other := s.mustClaim(t, st, params(id, "fp", lease, tc.retention), store.Running)
				if !other.LeaseEnd.Equal(again.LeaseEnd) {
					t.Fatalf("other Claim = %+v, want Running until %v", other, again.LeaseEnd)
				}
				c.Advance(time.Millisecond)
				if res := s.mustClaim(t, st, params(id, "fp", lease, tc.retention), store.Claimed); !res.Takeover {
					t.Fatalf("Claim at the refreshed lease end = %+v, want a takeover", res)
				}
			})
		}
		t.Run("expiry never shortened", func(t *testing.T) {
			id := newID()
			p := params(id, "fp", lease, 2*lease)
			s.mustClaim(t, st, p, store.Claimed)
			s.mustBool(t, "Extend", extend(st, id, p.Token, time.Hour), true)
			before := s.mustGet(t, st, id)
			c.Advance(lease)
			again := s.mustClaim(t, st, p, store.Claimed)
			r := s.mustGet(t, st, id)
			if !r.LeaseEnd.Equal(again.LeaseEnd) || !r.RetentionEnd.Equal(before.RetentionEnd) {
				t.Fatalf("after the repeated Claim: lease end %v expiry %v, want lease end %v and the expiry %v kept", r.LeaseEnd, r.RetentionEnd, again.LeaseEnd, before.RetentionEnd)
			}
		})
		return
	}
	// Real clock: a lease long enough that the claims right after the
	// repeated one run well within it.
	lease := time.Second
	id := newID()
	p := params(id, "fp", lease, time.Hour)
	first := s.mustClaim(t, st, p, store.Claimed)
	before := s.mustGet(t, st, id)
	s.elapse(lease) // past the first lease's end
	from := time.Now().Truncate(time.Millisecond)
	again := s.mustClaim(t, st, p, store.Claimed)
	to := time.Now()
	if again.Takeover || again.Fingerprint != "fp" || again.LeaseEnd.Before(from.Add(lease)) || again.LeaseEnd.After(to.Add(lease)) {
		t.Fatalf("repeated Claim = %+v, want Claimed without takeover, lease end now+lease in [%v, %v] (first lease end %v)", again, from.Add(lease), to.Add(lease), first.LeaseEnd)
	}
	other := s.mustClaim(t, st, params(id, "fp", lease, time.Hour), store.Running)
	if !other.LeaseEnd.Equal(again.LeaseEnd) {
		t.Fatalf("other Claim = %+v, want Running until %v", other, again.LeaseEnd)
	}
	r := s.mustGet(t, st, id)
	if r == nil || r.State != store.Running || r.Token != p.Token || !r.LeaseEnd.Equal(again.LeaseEnd) || r.RetentionEnd.Before(before.RetentionEnd) {
		t.Fatalf("record after the repeated Claim = %+v, want running, held by %q until %v, expiry not before %v", r, p.Token, again.LeaseEnd, before.RetentionEnd)
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (s *suite) testPeerShares(t *testing.T) {
	st := s.newStore(t)
	peer := s.peer(t, st)
	id := newID()
	p := params(id, "fp", longLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustClaim(t, peer, params(id, "fp", longLease, time.Hour), store.Running)
	s.mustBool(t, "Complete from peer with holder's token", complete(peer, id, p.Token, sampleResponse()), true)
	res := s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
	sameResponse(t, "claim after peer's Complete", res.Response, sampleResponse())
}
