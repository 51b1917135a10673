// Package storetest checks that a store.Store keeps every rule of the store contract, one subtest per behaviour.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Harness describes the store under test.
//
// With a real clock (Clock nil) the suite uses short real leases (100-300
// ms) and only ever sleeps to make time pass, never to hope something has
// not happened yet; the exact end <= now boundary is checked only with an
// injected Clock.
type Harness struct {
	// NewStore returns a fresh, empty store for one subtest; the harness
	// closes it in t.Cleanup. Required.
	NewStore func(t *testing.T) store.Store
	// NewPeer returns a second store instance sharing s's backing server and
	// namespace, as another idemgate process would (closed in t.Cleanup).
	// Nil when the implementation is not shared between instances; the
	// cross-instance subtests then skip with a message.
	NewPeer func(t *testing.T, s store.Store) store.Store
	// Clock is the injected clock the stores from NewStore read. Nil means
	// the store uses a real clock (e.g. the Valkey server's).
	Clock *Clock
}

// Clock is a manual clock for stores with an injectable clock. Safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time; pass c.Now as the store's clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Run checks newStore's stores against the whole contract with a real clock
// and no second instance.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	RunHarness(t, Harness{NewStore: newStore})
}

// RunHarness checks the stores of h against the whole contract.
func RunHarness(t *testing.T, h Harness) {
	if h.NewStore == nil {
		t.Fatal("storetest: Harness.NewStore is nil")
	}
	s := &suite{h: h}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"ClaimFree", s.testClaimFree},
		{"ConcurrentClaims", s.testConcurrentClaims},
		{"RunningAndCompletedAnswers", s.testRunningAndCompleted},
		{"RepeatedClaimSameToken", s.testRepeatedClaimSameToken},
		{"RepeatedClaimRefreshesLease", s.testRepeatedClaimRefreshesLease},
		{"RetentionEndIsAbsent", s.testRetentionEnd},
		{"RunningExpiryIsAbsent", s.testRunningExpiry},
		{"ExactBoundary", s.testExactBoundary},
		{"StaleToken", s.testStaleToken},
		{"Takeover", s.testTakeover},
		{"HolderActsPastLease", s.testHolderPastLease},
		{"ExtendKeepsRecord", s.testExtend},
		{"OneClock", s.testOneClock},
		{"DoneContext", s.testDoneContext},
		{"RetentionZero", s.testRetentionZero},
		{"RunningAlwaysExpires", s.testRunningAlwaysExpires},
		{"RoundTripIdentity", s.testRoundTripIdentity},
		{"RoundTripResponse", s.testRoundTripResponse},
		{"RoundTripRecipe", s.testRoundTripRecipe},
		{"CopiesInAndOut", s.testCopies},
		{"GetAndDelete", s.testGetDelete},
		{"WatchWokenByComplete", func(t *testing.T) { s.testWatch(t, "complete", false) }},
		{"WatchWokenByRelease", func(t *testing.T) { s.testWatch(t, "release", false) }},
		{"WatchWokenByDelete", func(t *testing.T) { s.testWatch(t, "delete", false) }},
		{"WatchNotWokenByOthers", s.testWatchOthers},
		{"WatchStop", s.testWatchStop},
		{"PeerWatchWokenByComplete", func(t *testing.T) { s.testWatch(t, "complete", true) }},
		{"PeerWatchWokenByRelease", func(t *testing.T) { s.testWatch(t, "release", true) }},
		{"PeerWatchWokenByDelete", func(t *testing.T) { s.testWatch(t, "delete", true) }},
		{"PeerSharesRecords", s.testPeerShares},
		{"Ping", s.testPing},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct{ h Harness }

const (
	// longLease is a lease no subtest outlives.
	longLease = time.Minute
	// shortLease is the lease of subtests that wait for one to end.
	shortLease = 100 * time.Millisecond
	// wakeTimeout bounds how long a watcher may take to be woken.
	wakeTimeout = 3 * time.Second
	// quietWindow is how long a watcher must stay asleep to count as not woken.
	quietWindow = 200 * time.Millisecond
	// opTimeout bounds every store call of the suite.
	opTimeout = 10 * time.Second
)

func (s *suite) newStore(t *testing.T) store.Store {
	t.Helper()
	st := s.h.NewStore(t)
	if st == nil {
		t.Fatal("storetest: NewStore returned nil")
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (s *suite) peer(t *testing.T, st store.Store) store.Store {
	t.Helper()
	if s.h.NewPeer == nil {
		t.Skip("storetest: store is not shared between instances (Harness.NewPeer is nil)")
	}
	p := s.h.NewPeer(t, st)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// elapse makes d pass on the store's clock: advances an injected clock, or
// sleeps d plus a margin for millisecond truncation on a real clock.
func (s *suite) elapse(d time.Duration) {
	if s.h.Clock != nil {
		s.h.Clock.Advance(d)
		return
	}
	time.Sleep(d + 5*time.Millisecond)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return c
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newID() store.Identity {
	return store.Identity{Owner: "owner-" + random(4), Scope: "POST /orders", Key: "key-" + random(8)}
}

func newToken() string { return "tok-" + random(12) }

func params(id store.Identity, fp string, lease, retention time.Duration) store.ClaimParams {
	return store.ClaimParams{Identity: id, Fingerprint: fp, Token: newToken(), Lease: lease, Retention: retention}
}

func mustClaim(t *testing.T, st store.Store, p store.ClaimParams, want store.State) store.ClaimResult {
	t.Helper()
	res, err := st.Claim(ctx(t), p)
	if err != nil {
		t.Fatalf("Claim(%+v): %v", p.Identity, err)
	}
	if res.State != want {
		t.Fatalf("Claim(%+v) state = %v, want %v (result %+v)", p.Identity, res.State, want, res)
	}
	return res
}

func mustGet(t *testing.T, st store.Store, id store.Identity) *store.Record {
	t.Helper()
	r, err := st.Get(ctx(t), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return r
}

type boolOp func(context.Context) (bool, error)

func mustBool(t *testing.T, what string, op boolOp, want bool) {
	t.Helper()
	got, err := op(ctx(t))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func complete(st store.Store, id store.Identity, tok string, resp store.Response) boolOp {
	return func(c context.Context) (bool, error) { return st.Complete(c, id, tok, resp) }
}

func release(st store.Store, id store.Identity, tok string) boolOp {
	return func(c context.Context) (bool, error) { return st.Release(c, id, tok) }
}

func extend(st store.Store, id store.Identity, tok string, lease time.Duration) boolOp {
	return func(c context.Context) (bool, error) { return st.Extend(c, id, tok, lease) }
}

func del(st store.Store, id store.Identity) boolOp {
	return func(c context.Context) (bool, error) { return st.Delete(c, id) }
}

func sampleResponse() store.Response {
	h := http.Header{}
	h.Add("Content-Type", "application/octet-stream")
	h.Add("X-Multi", "first")
	h.Add("X-Multi", "second, with comma")
	h.Add("X-Multi", "")
	h.Add("Set-Cookie", "a=1; Path=/; HttpOnly")
	h.Add("Set-Cookie", "b=2; Expires=Wed, 21 Oct 2015 07:28:00 GMT")
	h["x-raw-lowercase"] = []string{"kept as given"}
	return store.Response{
		Status: 201,
		Header: h,
		Body:   []byte("binary\x00body\xff\xfe\x80 not utf-8 \r\n\x00"),
	}
}

// sameResponse fails unless got equals want except for StoredAt.
func sameResponse(t *testing.T, what string, got *store.Response, want store.Response) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: response is nil", what)
	}
	if got.Status != want.Status || got.Omitted != want.Omitted {
		t.Fatalf("%s: status/omitted = %d/%v, want %d/%v", what, got.Status, got.Omitted, want.Status, want.Omitted)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("%s: body = %q, want %q", what, got.Body, want.Body)
	}
	if len(got.Header) != 0 || len(want.Header) != 0 {
		if !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("%s: header = %#v, want %#v", what, got.Header, want.Header)
		}
	}
	if len(got.Trailer) != 0 || len(want.Trailer) != 0 {
		if !reflect.DeepEqual(got.Trailer, want.Trailer) {
			t.Fatalf("%s: trailer = %#v, want %#v", what, got.Trailer, want.Trailer)
		}
	}
	if got.StoredAt.IsZero() || !got.StoredAt.Equal(got.StoredAt.Truncate(time.Millisecond)) {
		t.Fatalf("%s: StoredAt = %v, want a non-zero time truncated to milliseconds", what, got.StoredAt)
	}
}

func (s *suite) testClaimFree(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp-1", longLease, time.Hour)
	var before time.Time
	if s.h.Clock != nil {
		before = s.h.Clock.Now().Truncate(time.Millisecond)
	}
	res := mustClaim(t, st, p, store.Claimed)
	if res.Takeover || res.Fingerprint != p.Fingerprint || res.Response != nil {
		t.Fatalf("Claim = %+v, want no takeover, the caller's fingerprint, no response", res)
	}
	if s.h.Clock != nil && !res.LeaseEnd.Equal(before.Add(longLease)) {
		t.Fatalf("LeaseEnd = %v, want now+lease = %v", res.LeaseEnd, before.Add(longLease))
	}
	r := mustGet(t, st, id)
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
		peer := s.h.NewPeer(t, st)
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
				results[i], errs[i] = stores[i%len(stores)].Claim(ctx(t), store.ClaimParams{
					Identity: id, Fingerprint: fmt.Sprintf("fp-%d", i), Token: tokens[i],
					Lease: longLease, Retention: time.Hour,
				})
			})
		}
		close(start)
		wg.Wait()
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
			if results[i].State != store.Running || results[i].Fingerprint != wantFP || !results[i].LeaseEnd.Equal(results[winner].LeaseEnd) {
				t.Fatalf("round %d: claim %d = %+v, want Running with the winner's fingerprint %q and lease end %v", round, i, results[i], wantFP, results[winner].LeaseEnd)
			}
		}
		if r := mustGet(t, st, id); r == nil || r.Token != tokens[winner] {
			t.Fatalf("round %d: record = %+v, want it held by the winner's token", round, r)
		}
	}
}

func (s *suite) testRunningAndCompleted(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	first := mustClaim(t, st, params(id, "fp-a", longLease, time.Hour), store.Claimed)
	for _, fp := range []string{"fp-a", "fp-b"} {
		p := params(id, fp, longLease, time.Hour)
		p.NoTakeover = fp == "fp-b"
		res := mustClaim(t, st, p, store.Running)
		if res.Fingerprint != "fp-a" || !res.LeaseEnd.Equal(first.LeaseEnd) || res.Takeover || res.Response != nil {
			t.Fatalf("Claim(%s) on running record = %+v, want Running fp-a lease end %v", fp, res, first.LeaseEnd)
		}
	}
	// Complete with the holder's token; every later claim answers Completed.
	rec := mustGet(t, st, id)
	resp := sampleResponse()
	mustBool(t, "Complete by holder", complete(st, id, rec.Token, resp), true)
	for _, fp := range []string{"fp-a", "fp-other"} {
		res := mustClaim(t, st, params(id, fp, longLease, time.Hour), store.Completed)
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
	first := mustClaim(t, st, p, store.Claimed)
	// A claim retried after its reply was lost must not answer Running to
	// the claimer itself.
	again := mustClaim(t, st, p, store.Claimed)
	// Its lease restarts (RepeatedClaimRefreshesLease); on an injected clock
	// no time passed.
	if again.LeaseEnd.Before(first.LeaseEnd) || (s.h.Clock != nil && !again.LeaseEnd.Equal(first.LeaseEnd)) ||
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
	if c := s.h.Clock; c != nil {
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
				mustClaim(t, st, p, store.Claimed)
				c.Advance(tc.wait)
				now := c.Now().Truncate(time.Millisecond)
				before := mustGet(t, st, id)
				if before == nil {
					t.Fatal("Get before the repeated Claim = nil, want the running record")
				}
				again := mustClaim(t, st, p, store.Claimed)
				if again.Takeover || again.Fingerprint != "fp" || !again.LeaseEnd.Equal(now.Add(lease)) {
					t.Fatalf("repeated Claim = %+v, want Claimed without takeover, lease end now+lease = %v", again, now.Add(lease))
				}
				wantEnd := now.Add(max(lease, tc.retention))
				if tc.retention == 0 {
					wantEnd = again.LeaseEnd.Add(24 * time.Hour)
				}
				wantEnd = latest(wantEnd, before.RetentionEnd)
				r := mustGet(t, st, id)
				if r == nil || r.State != store.Running || r.Token != p.Token || !r.LeaseEnd.Equal(again.LeaseEnd) || !r.RetentionEnd.Equal(wantEnd) {
					t.Fatalf("record after the repeated Claim = %+v, want running, held by %q, lease end %v, expiry %v", r, p.Token, again.LeaseEnd, wantEnd)
				}
				c.Advance(lease - time.Millisecond)
				other := mustClaim(t, st, params(id, "fp", lease, tc.retention), store.Running)
				if !other.LeaseEnd.Equal(again.LeaseEnd) {
					t.Fatalf("other Claim = %+v, want Running until %v", other, again.LeaseEnd)
				}
				c.Advance(time.Millisecond)
				if res := mustClaim(t, st, params(id, "fp", lease, tc.retention), store.Claimed); !res.Takeover {
					t.Fatalf("Claim at the refreshed lease end = %+v, want a takeover", res)
				}
			})
		}
		t.Run("expiry never shortened", func(t *testing.T) {
			id := newID()
			p := params(id, "fp", lease, 2*lease)
			mustClaim(t, st, p, store.Claimed)
			mustBool(t, "Extend", extend(st, id, p.Token, time.Hour), true)
			before := mustGet(t, st, id)
			c.Advance(lease)
			again := mustClaim(t, st, p, store.Claimed)
			r := mustGet(t, st, id)
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
	first := mustClaim(t, st, p, store.Claimed)
	before := mustGet(t, st, id)
	s.elapse(lease) // past the first lease's end
	from := time.Now().Truncate(time.Millisecond)
	again := mustClaim(t, st, p, store.Claimed)
	to := time.Now()
	if again.Takeover || again.Fingerprint != "fp" || again.LeaseEnd.Before(from.Add(lease)) || again.LeaseEnd.After(to.Add(lease)) {
		t.Fatalf("repeated Claim = %+v, want Claimed without takeover, lease end now+lease in [%v, %v] (first lease end %v)", again, from.Add(lease), to.Add(lease), first.LeaseEnd)
	}
	other := mustClaim(t, st, params(id, "fp", lease, time.Hour), store.Running)
	if !other.LeaseEnd.Equal(again.LeaseEnd) {
		t.Fatalf("other Claim = %+v, want Running until %v", other, again.LeaseEnd)
	}
	r := mustGet(t, st, id)
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

func (s *suite) testRetentionEnd(t *testing.T) {
	st := s.newStore(t)
	retention := 150 * time.Millisecond
	id := newID()
	p := params(id, "fp", longLease, retention)
	mustClaim(t, st, p, store.Claimed)
	mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	r := mustGet(t, st, id)
	if r == nil || r.State != store.Completed {
		t.Fatalf("Get right after Complete = %+v, want completed", r)
	}
	if want := r.Response.StoredAt.Add(retention); !r.RetentionEnd.Equal(want) {
		t.Fatalf("RetentionEnd = %v, want StoredAt+retention = %v", r.RetentionEnd, want)
	}
	s.elapse(retention)
	if r := mustGet(t, st, id); r != nil {
		t.Fatalf("Get past retention end = %+v, want nil", r)
	}
	mustBool(t, "Complete past retention", complete(st, id, p.Token, sampleResponse()), false)
	mustBool(t, "Extend past retention", extend(st, id, p.Token, longLease), false)
	mustBool(t, "Release past retention", release(st, id, p.Token), false)
	mustBool(t, "Delete past retention", del(st, id), false)
	res := mustClaim(t, st, params(id, "other-fp", longLease, time.Hour), store.Claimed)
	if res.Takeover {
		t.Fatal("Claim past retention answered Takeover, want a fresh claim")
	}
}

func (s *suite) testRunningExpiry(t *testing.T) {
	st := s.newStore(t)
	// A running record lives until the later of lease end and claim+retention.
	lease, retention := shortLease, 2*shortLease
	id := newID()
	p := params(id, "fp", lease, retention)
	res := mustClaim(t, st, p, store.Claimed)
	r := mustGet(t, st, id)
	if r == nil || !r.RetentionEnd.Equal(r.CreatedAt.Add(retention)) {
		t.Fatalf("running record = %+v, want RetentionEnd = CreatedAt+retention", r)
	}
	if r.RetentionEnd.Before(res.LeaseEnd) {
		t.Fatalf("RetentionEnd %v before LeaseEnd %v", r.RetentionEnd, res.LeaseEnd)
	}
	s.elapse(retention)
	if r := mustGet(t, st, id); r != nil {
		t.Fatalf("Get past running record's end = %+v, want nil", r)
	}
	mustBool(t, "Complete past end", complete(st, id, p.Token, sampleResponse()), false)
	mustBool(t, "Extend past end", extend(st, id, p.Token, longLease), false)
	mustBool(t, "Release past end", release(st, id, p.Token), false)
	mustBool(t, "Delete past end", del(st, id), false)
	// A different fingerprint claims it: the record is absent, not abandoned.
	res = mustClaim(t, st, params(id, "other-fp", longLease, time.Hour), store.Claimed)
	if res.Takeover {
		t.Fatal("Claim past running record's end answered Takeover, want a fresh claim")
	}
}

func (s *suite) testExactBoundary(t *testing.T) {
	if s.h.Clock == nil {
		t.Skip("storetest: the exact end <= now boundary needs an injected clock (Harness.Clock)")
	}
	st := s.newStore(t)
	c := s.h.Clock
	lease, retention := time.Second, 5*time.Second
	id := newID()
	p := params(id, "fp", lease, retention)
	mustClaim(t, st, p, store.Claimed)
	c.Advance(lease - time.Millisecond)
	mustClaim(t, st, params(id, "fp", lease, retention), store.Running) // end > now: valid
	c.Advance(time.Millisecond)
	// end == now: the lease is over.
	mustClaim(t, st, params(id, "other", lease, retention), store.Abandoned)
	if r := mustGet(t, st, id); r == nil || r.State != store.Abandoned {
		t.Fatalf("Get at lease end = %+v, want abandoned", r)
	}
	q := params(id, "fp", lease, retention)
	if res := mustClaim(t, st, q, store.Claimed); !res.Takeover {
		t.Fatal("Claim at lease end with same fingerprint: want Takeover")
	}
	mustBool(t, "Complete", complete(st, id, q.Token, sampleResponse()), true)
	c.Advance(retention - time.Millisecond)
	if r := mustGet(t, st, id); r == nil || r.State != store.Completed {
		t.Fatalf("Get 1ms before retention end = %+v, want completed", r)
	}
	c.Advance(time.Millisecond)
	if r := mustGet(t, st, id); r != nil {
		t.Fatalf("Get at retention end = %+v, want nil", r)
	}
	// Running record end, same boundary.
	id2 := newID()
	mustClaim(t, st, params(id2, "fp", lease, retention), store.Claimed)
	c.Advance(retention - time.Millisecond)
	mustClaim(t, st, params(id2, "other", lease, retention), store.Abandoned)
	c.Advance(time.Millisecond)
	mustClaim(t, st, params(id2, "other", lease, retention), store.Claimed)
}

func (s *suite) testStaleToken(t *testing.T) {
	st := s.newStore(t)
	t.Run("wrong token", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		mustClaim(t, st, p, store.Claimed)
		before := mustGet(t, st, id)
		mustBool(t, "Complete wrong token", complete(st, id, "not-"+p.Token, sampleResponse()), false)
		mustBool(t, "Release wrong token", release(st, id, "not-"+p.Token), false)
		mustBool(t, "Extend wrong token", extend(st, id, "not-"+p.Token, 2*longLease), false)
		mustBool(t, "Complete empty token", complete(st, id, "", sampleResponse()), false)
		after := mustGet(t, st, id)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("record changed by wrong-token calls:\nbefore %+v\nafter  %+v", before, after)
		}
	})
	t.Run("after completion", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		mustClaim(t, st, p, store.Claimed)
		resp := sampleResponse()
		mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
		before := mustGet(t, st, id)
		if before.Token != "" || !before.LeaseEnd.IsZero() {
			t.Fatalf("completed record = %+v, want no token and zero lease end", before)
		}
		other := store.Response{Status: 500, Body: []byte("other")}
		mustBool(t, "second Complete", complete(st, id, p.Token, other), false)
		mustBool(t, "Release of completed", release(st, id, p.Token), false)
		mustBool(t, "Extend of completed", extend(st, id, p.Token, longLease), false)
		mustBool(t, "Release with empty token", release(st, id, ""), false)
		after := mustGet(t, st, id)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("completed record changed:\nbefore %+v\nafter  %+v", before, after)
		}
		sameResponse(t, "completed record", after.Response, resp)
	})
	t.Run("after takeover", func(t *testing.T) {
		id := newID()
		a := params(id, "fp", shortLease, time.Hour)
		mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		b := params(id, "fp", longLease, time.Hour)
		if res := mustClaim(t, st, b, store.Claimed); !res.Takeover {
			t.Fatalf("takeover claim = %+v, want Takeover", res)
		}
		before := mustGet(t, st, id)
		mustBool(t, "Complete by old holder", complete(st, id, a.Token, sampleResponse()), false)
		mustBool(t, "Extend by old holder", extend(st, id, a.Token, longLease), false)
		mustBool(t, "Release by old holder", release(st, id, a.Token), false)
		after := mustGet(t, st, id)
		if !reflect.DeepEqual(before, after) || after.Token != b.Token {
			t.Fatalf("record changed by old holder:\nbefore %+v\nafter  %+v", before, after)
		}
		mustBool(t, "Complete by new holder", complete(st, id, b.Token, sampleResponse()), true)
	})
	t.Run("after release", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		mustClaim(t, st, p, store.Claimed)
		mustBool(t, "Release", release(st, id, p.Token), true)
		mustBool(t, "second Release", release(st, id, p.Token), false)
		mustBool(t, "Complete after Release", complete(st, id, p.Token, sampleResponse()), false)
		mustBool(t, "Extend after Release", extend(st, id, p.Token, longLease), false)
		if r := mustGet(t, st, id); r != nil {
			t.Fatalf("Get after Release = %+v, want nil", r)
		}
		if res := mustClaim(t, st, params(id, "other", longLease, time.Hour), store.Claimed); res.Takeover {
			t.Fatal("Claim after Release answered Takeover")
		}
	})
}

func (s *suite) testTakeover(t *testing.T) {
	st := s.newStore(t)
	t.Run("same fingerprint", func(t *testing.T) {
		id := newID()
		a := params(id, "fp", shortLease, time.Hour)
		mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		if r := mustGet(t, st, id); r == nil || r.State != store.Abandoned || r.Token != a.Token {
			t.Fatalf("Get past lease = %+v, want abandoned holding the first token", r)
		}
		b := params(id, "fp", longLease, time.Hour)
		res := mustClaim(t, st, b, store.Claimed)
		if !res.Takeover || res.Fingerprint != "fp" {
			t.Fatalf("Claim past lease = %+v, want Claimed with Takeover", res)
		}
		if r := mustGet(t, st, id); r == nil || r.State != store.Running || r.Token != b.Token {
			t.Fatalf("Get after takeover = %+v, want running with the new token", r)
		}
		// The retried takeover claim keeps answering the same (its lease
		// restarted, see RepeatedClaimRefreshesLease).
		if again := mustClaim(t, st, b, store.Claimed); !again.Takeover || again.LeaseEnd.Before(res.LeaseEnd) {
			t.Fatalf("repeated takeover claim = %+v, want %+v", again, res)
		}
	})
	t.Run("different fingerprint never", func(t *testing.T) {
		id := newID()
		a := params(id, "fp-a", shortLease, time.Hour)
		claimed := mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		for range 3 {
			res := mustClaim(t, st, params(id, "fp-b", longLease, time.Hour), store.Abandoned)
			if res.Fingerprint != "fp-a" || res.Takeover || !res.LeaseEnd.Equal(claimed.LeaseEnd) {
				t.Fatalf("Claim with other fingerprint = %+v, want Abandoned with fp-a", res)
			}
			s.elapse(shortLease)
		}
		if r := mustGet(t, st, id); r == nil || r.Token != a.Token {
			t.Fatalf("record = %+v, want still held by the first token", r)
		}
	})
	t.Run("NoTakeover", func(t *testing.T) {
		id := newID()
		a := params(id, "fp", shortLease, time.Hour)
		mustClaim(t, st, a, store.Claimed)
		s.elapse(shortLease)
		b := params(id, "fp", longLease, time.Hour)
		b.NoTakeover = true
		res := mustClaim(t, st, b, store.Abandoned)
		if res.Fingerprint != "fp" || res.Takeover {
			t.Fatalf("NoTakeover claim = %+v, want Abandoned", res)
		}
		if r := mustGet(t, st, id); r == nil || r.Token != a.Token {
			t.Fatalf("record = %+v, want still held by the first token", r)
		}
	})
}

func (s *suite) testHolderPastLease(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", shortLease, time.Hour)
	mustClaim(t, st, p, store.Claimed)
	s.elapse(shortLease)
	mustBool(t, "Extend past lease, not taken over", extend(st, id, p.Token, longLease), true)
	mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Running)
	id2 := newID()
	p2 := params(id2, "fp", shortLease, time.Hour)
	mustClaim(t, st, p2, store.Claimed)
	s.elapse(shortLease)
	mustBool(t, "Complete past lease, not taken over", complete(st, id2, p2.Token, sampleResponse()), true)
	mustClaim(t, st, params(id2, "fp", longLease, time.Hour), store.Completed)
}

func (s *suite) testExtend(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	if c := s.h.Clock; c != nil {
		lease := time.Second
		p := params(id, "fp", lease, time.Hour)
		mustClaim(t, st, p, store.Claimed)
		c.Advance(lease - time.Millisecond)
		extendedAt := c.Now().Truncate(time.Millisecond)
		mustBool(t, "Extend", extend(st, id, p.Token, lease), true)
		c.Advance(2 * time.Millisecond) // past the original lease end
		res := mustClaim(t, st, params(id, "fp", lease, time.Hour), store.Running)
		if want := extendedAt.Add(lease); !res.LeaseEnd.Equal(want) {
			t.Fatalf("LeaseEnd after Extend = %v, want %v", res.LeaseEnd, want)
		}
		return
	}
	// Real clock: extend every 60ms with a 300ms lease for twice the lease;
	// a same-fingerprint claim right after each Extend must stay Running.
	lease := 300 * time.Millisecond
	p := params(id, "fp", lease, time.Hour)
	first := mustClaim(t, st, p, store.Claimed)
	for time.Until(first.LeaseEnd) > -lease {
		time.Sleep(60 * time.Millisecond)
		mustBool(t, "Extend", extend(st, id, p.Token, lease), true)
		res := mustClaim(t, st, params(id, "fp", lease, time.Hour), store.Running)
		if !res.LeaseEnd.After(first.LeaseEnd) && time.Now().After(first.LeaseEnd) {
			t.Fatalf("LeaseEnd %v not moved past the original %v", res.LeaseEnd, first.LeaseEnd)
		}
	}
	if r := mustGet(t, st, id); r == nil || r.Token != p.Token || r.State != store.Running {
		t.Fatalf("record = %+v, want still running with the extending token", r)
	}
}

func (s *suite) testOneClock(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	retention := time.Hour
	var now time.Time
	if s.h.Clock != nil {
		now = s.h.Clock.Now().Truncate(time.Millisecond)
	}
	p := params(id, "fp", 1500*time.Millisecond, retention)
	res := mustClaim(t, st, p, store.Claimed)
	r := mustGet(t, st, id)
	if !r.CreatedAt.Equal(r.CreatedAt.Truncate(time.Millisecond)) || !res.LeaseEnd.Equal(r.CreatedAt.Add(p.Lease)) {
		t.Fatalf("CreatedAt %v LeaseEnd %v: want ms resolution and LeaseEnd = CreatedAt+lease", r.CreatedAt, res.LeaseEnd)
	}
	if s.h.Clock != nil && !r.CreatedAt.Equal(now) {
		t.Fatalf("CreatedAt = %v, want the store clock's %v", r.CreatedAt, now)
	}
	mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	r = mustGet(t, st, id)
	if r.Response.StoredAt.Before(r.CreatedAt) || !r.RetentionEnd.Equal(r.Response.StoredAt.Add(retention)) {
		t.Fatalf("StoredAt %v CreatedAt %v RetentionEnd %v: want StoredAt >= CreatedAt, RetentionEnd = StoredAt+retention", r.Response.StoredAt, r.CreatedAt, r.RetentionEnd)
	}
	if s.h.Clock != nil && !r.Response.StoredAt.Equal(now) {
		t.Fatalf("StoredAt = %v, want the store clock's %v", r.Response.StoredAt, now)
	}
}

func (s *suite) testDoneContext(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	held := params(id, "fp", longLease, time.Hour)
	mustClaim(t, st, held, store.Claimed)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"canceled", canceled, context.Canceled}, {"deadline", expired, context.DeadlineExceeded}} {
		fresh := newID()
		check := func(op string, err error) {
			t.Helper()
			if err == nil || !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, c.want) {
				t.Fatalf("%s with %s context: err = %v, want it to wrap ErrUnavailable and %v", op, c.name, err, c.want)
			}
		}
		res, err := st.Claim(c.ctx, params(fresh, "fp", longLease, time.Hour))
		check("Claim", err)
		if res.State == store.Claimed {
			t.Fatalf("Claim with %s context answered Claimed", c.name)
		}
		_, err = st.Complete(c.ctx, id, held.Token, sampleResponse())
		check("Complete", err)
		_, err = st.Release(c.ctx, id, held.Token)
		check("Release", err)
		_, err = st.Extend(c.ctx, id, held.Token, longLease)
		check("Extend", err)
		_, err = st.Get(c.ctx, id)
		check("Get", err)
		_, err = st.Delete(c.ctx, id)
		check("Delete", err)
		check("Ping", st.Ping(c.ctx))
		if r := mustGet(t, st, fresh); r != nil {
			t.Fatalf("Claim with %s context left a record: %+v", c.name, r)
		}
	}
	if r := mustGet(t, st, id); r == nil || r.State != store.Running || r.Token != held.Token {
		t.Fatalf("record changed by calls with done contexts: %+v", r)
	}
}

func (s *suite) testRetentionZero(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", shortLease, 0)
	mustClaim(t, st, p, store.Claimed)
	mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	r := mustGet(t, st, id)
	if r == nil || r.State != store.Completed || !r.RetentionEnd.IsZero() {
		t.Fatalf("completed record with retention 0 = %+v, want RetentionEnd zero (never)", r)
	}
	if s.h.Clock != nil {
		s.h.Clock.Advance(100 * 365 * 24 * time.Hour)
	} else {
		s.elapse(2 * shortLease)
	}
	if r := mustGet(t, st, id); r == nil || r.State != store.Completed {
		t.Fatalf("completed record with retention 0 after a long time = %+v, want kept", r)
	}
	mustClaim(t, st, params(id, "fp", longLease, 0), store.Completed)
}

func (s *suite) testRunningAlwaysExpires(t *testing.T) {
	st := s.newStore(t)
	for _, retention := range []time.Duration{0, time.Millisecond, time.Hour} {
		id := newID()
		p := params(id, "fp", longLease, retention)
		res := mustClaim(t, st, p, store.Claimed)
		check := func(when string) {
			t.Helper()
			r := mustGet(t, st, id)
			if r == nil || r.RetentionEnd.IsZero() || r.RetentionEnd.Before(r.LeaseEnd) {
				t.Fatalf("retention %v, %s: running record %+v must expire, not before its lease end", retention, when, r)
			}
			if retention == 0 && !r.RetentionEnd.Equal(r.LeaseEnd.Add(24*time.Hour)) {
				t.Fatalf("retention 0, %s: RetentionEnd = %v, want lease end + 24h = %v", when, r.RetentionEnd, r.LeaseEnd.Add(24*time.Hour))
			}
		}
		check("after Claim")
		mustBool(t, "Extend", extend(st, id, p.Token, 2*longLease), true)
		check("after Extend")
		if r := mustGet(t, st, id); !r.LeaseEnd.After(res.LeaseEnd) {
			t.Fatalf("Extend did not move the lease end: %v -> %v", res.LeaseEnd, r.LeaseEnd)
		}
	}
	if s.h.Clock != nil {
		// A crashed holder's record with retention 0 is gone a day after its lease.
		id := newID()
		mustClaim(t, st, params(id, "fp", time.Second, 0), store.Claimed)
		s.h.Clock.Advance(time.Second + 24*time.Hour)
		if r := mustGet(t, st, id); r != nil {
			t.Fatalf("abandoned record with retention 0 a day past its lease = %+v, want nil", r)
		}
	}
}

// identities are the odd identities every round trip uses.
func identities() []store.Identity {
	long := strings.Repeat("o", 4096)
	return []store.Identity{
		{Owner: "alice", Scope: "POST /orders", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{Owner: "", Scope: "POST /global", Key: "global-scope"},
		{Owner: "a:b", Scope: "c", Key: "d"},
		{Owner: "a", Scope: "b:c", Key: "d"},
		{Owner: "a", Scope: "b", Key: "c:d"},
		{Owner: "{tag}", Scope: "}{", Key: "{}"},
		{Owner: "\x00\xff\xfe", Scope: "\x00", Key: "nul\x00in\x00key"},
		{Owner: "ünïcødé 🔑", Scope: "PATCH /ресурс", Key: "キー"},
		{Owner: long, Scope: "r", Key: "k"},
		{Owner: "o", Scope: "r", Key: ""},
		{Owner: "o\nx", Scope: " r ", Key: "\"quoted\" \\ key"},
	}
}

func (s *suite) testRoundTripIdentity(t *testing.T) {
	st := s.newStore(t)
	suffix := random(4)
	tokens := map[store.Identity]string{}
	fingerprints := map[store.Identity]string{}
	for i, id := range identities() {
		id.Key += suffix // fresh per run, on a shared server
		fp := fmt.Sprintf("fp-%d-\x00\xff-", i) + strings.Repeat("f", 100)
		p := params(id, fp, longLease, time.Hour)
		p.Token = fmt.Sprintf("tok\x00%d\xff", i)
		res := mustClaim(t, st, p, store.Claimed)
		if res.Fingerprint != fp {
			t.Fatalf("%q: Claimed fingerprint %q, want %q", id, res.Fingerprint, fp)
		}
		tokens[id], fingerprints[id] = p.Token, fp
	}
	// Only after all claims: identities that differ only in where the
	// separators fall must be distinct records.
	for id, tok := range tokens {
		r := mustGet(t, st, id)
		if r == nil || r.Identity != id || r.Token != tok || r.Fingerprint != fingerprints[id] {
			t.Fatalf("Get(%q) = %+v, want identity, token %q and fingerprint %q as given", id, r, tok, fingerprints[id])
		}
		resp := sampleResponse()
		resp.Body = append(resp.Body, id.Owner...)
		mustBool(t, "Complete", complete(st, id, tok, resp), true)
		res := mustClaim(t, st, params(id, "x", longLease, time.Hour), store.Completed)
		if res.Fingerprint != fingerprints[id] {
			t.Fatalf("Completed fingerprint %q, want %q", res.Fingerprint, fingerprints[id])
		}
		sameResponse(t, fmt.Sprintf("%q", id), res.Response, resp)
	}
}

// testRoundTripRecipe checks that the record keeps the recipe of the claim
// that created it and hands it back in every answer (contract rule 7), so
// a retry made under other fingerprint settings is compared the way its
// first request was.
func (s *suite) testRoundTripRecipe(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	const recipe = "b=json&h=content-type&h=x-%00odd&q=0&v=hs1"
	p := params(id, "fp", longLease, time.Hour)
	p.Recipe = recipe
	if res := mustClaim(t, st, p, store.Claimed); res.Recipe != recipe {
		t.Fatalf("Claimed recipe %q, want the caller's %q", res.Recipe, recipe)
	}
	other := params(id, "fp-other", longLease, time.Hour)
	other.Recipe = "b=raw&q=1&v=hs1"
	if res := mustClaim(t, st, other, store.Running); res.Recipe != recipe || res.Fingerprint != "fp" {
		t.Fatalf("Running answer = %+v, want the record's recipe %q and fingerprint", res, recipe)
	}
	if r := mustGet(t, st, id); r == nil || r.Recipe != recipe {
		t.Fatalf("Get = %+v, want recipe %q", r, recipe)
	}
	mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	if res := mustClaim(t, st, other, store.Completed); res.Recipe != recipe {
		t.Fatalf("Completed answer recipe %q, want %q", res.Recipe, recipe)
	}
	if r := mustGet(t, st, id); r == nil || r.Recipe != recipe {
		t.Fatalf("Get after Complete = %+v, want recipe %q", r, recipe)
	}
}

func (s *suite) testRoundTripResponse(t *testing.T) {
	st := s.newStore(t)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	cases := map[string]store.Response{
		"full":            sampleResponse(),
		"empty body":      {Status: 204, Header: http.Header{"X-A": {"1"}}, Body: []byte{}},
		"nil header":      {Status: 200, Body: []byte("x")},
		"omitted":         {Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Omitted: true},
		"1 MiB binary":    {Status: 200, Body: big},
		"empty value":     {Status: 202, Header: http.Header{"X-Empty": {""}, "X-Two": {"", ""}}},
		"odd header name": {Status: 299, Header: http.Header{"X-\x00Odd:Name": {"v\x00\r\nx"}}},
		// Trailers (issue 13): kept apart from the header, values in
		// order, with and without a header and a body.
		"trailer": {Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("chunked"),
			Trailer: http.Header{"Grpc-Status": {"0"}, "X-Checksum": {"a", "b, c", ""}, "x-raw": {"kept"}}},
		"trailer only": {Status: 201, Trailer: http.Header{"X-T": {"1"}}},
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			id := newID()
			p := params(id, "fp", longLease, time.Hour)
			mustClaim(t, st, p, store.Claimed)
			mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
			r := mustGet(t, st, id)
			if r == nil || r.State != store.Completed || r.Fingerprint != "fp" || r.Token != "" {
				t.Fatalf("Get = %+v, want completed record without token", r)
			}
			sameResponse(t, "Get", r.Response, resp)
			res := mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
			sameResponse(t, "Claim", res.Response, resp)
			if !res.Response.StoredAt.Equal(r.Response.StoredAt) {
				t.Fatalf("StoredAt differs between Get (%v) and Claim (%v)", r.Response.StoredAt, res.Response.StoredAt)
			}
			if got := res.Response.Header.Values("Set-Cookie"); len(resp.Header.Values("Set-Cookie")) > 0 && len(got) != 2 {
				t.Fatalf("Set-Cookie lines = %q, want two separate values", got)
			}
		})
	}
}

func (s *suite) testCopies(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", longLease, time.Hour)
	mustClaim(t, st, p, store.Claimed)
	resp := sampleResponse()
	want := sampleResponse()
	mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
	// Mutating what was passed in must not reach the store.
	resp.Body[0] = 'X'
	resp.Header.Set("Content-Type", "mutated")
	resp.Header["X-Multi"][0] = "mutated"
	got := mustGet(t, st, id)
	sameResponse(t, "after mutating the input", got.Response, want)
	// Nor must mutating what came out.
	got.Response.Body[0] = 'Y'
	got.Response.Header["X-Multi"][0] = "mutated"
	res := mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
	sameResponse(t, "after mutating the output", res.Response, want)
}

func (s *suite) testGetDelete(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	if r := mustGet(t, st, id); r != nil {
		t.Fatalf("Get of a fresh identity = %+v, want nil", r)
	}
	mustBool(t, "Delete absent", del(st, id), false)
	p := params(id, "fp", longLease, time.Hour)
	mustClaim(t, st, p, store.Claimed)
	mustBool(t, "Delete running", del(st, id), true)
	if r := mustGet(t, st, id); r != nil {
		t.Fatalf("Get after Delete = %+v, want nil", r)
	}
	mustBool(t, "Complete after Delete", complete(st, id, p.Token, sampleResponse()), false)
	q := params(id, "fp", longLease, time.Hour)
	if res := mustClaim(t, st, q, store.Claimed); res.Takeover {
		t.Fatal("Claim after Delete answered Takeover")
	}
	mustBool(t, "Complete", complete(st, id, q.Token, sampleResponse()), true)
	mustBool(t, "Delete completed", del(st, id), true)
	mustBool(t, "Delete again", del(st, id), false)
	if r := mustGet(t, st, id); r != nil {
		t.Fatalf("Get after Delete = %+v, want nil", r)
	}
}

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
	mustClaim(t, actor, p, store.Claimed)
	switch by {
	case "complete":
		mustBool(t, "Complete", complete(actor, id, p.Token, sampleResponse()), true)
	case "release":
		mustBool(t, "Release", release(actor, id, p.Token), true)
	case "delete":
		mustBool(t, "Delete", del(actor, id), true)
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
	mustClaim(t, st, p, store.Claimed)
	ch, stop := st.Watch(watched)
	defer stop()
	for _, by := range []string{"complete", "release", "delete"} {
		q := params(other, "fp", longLease, time.Hour)
		mustClaim(t, st, q, store.Claimed)
		switch by {
		case "complete":
			mustBool(t, "Complete other", complete(st, other, q.Token, sampleResponse()), true)
			mustBool(t, "Delete other", del(st, other), true)
		case "release":
			mustBool(t, "Release other", release(st, other, q.Token), true)
		case "delete":
			mustBool(t, "Delete other", del(st, other), true)
		}
	}
	// Changes to the watched record that are not completion, release or
	// deletion do not wake it either.
	mustBool(t, "Extend watched", extend(st, watched, p.Token, longLease), true)
	mustClaim(t, st, params(watched, "fp", longLease, time.Hour), store.Running)
	select {
	case <-ch:
		t.Fatalf("watcher woken by changes to another identity")
	case <-time.After(quietWindow):
	}
	mustBool(t, "Complete watched", complete(st, watched, p.Token, sampleResponse()), true)
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
	mustClaim(t, st, p, store.Claimed)
	mustBool(t, "Release", release(st, id, p.Token), true)
	waitClosed(t, live, "release")
	select {
	case <-ch:
		// A stopped watcher may or may not be closed; it must just not panic.
	default:
	}
}

func (s *suite) testPeerShares(t *testing.T) {
	st := s.newStore(t)
	peer := s.peer(t, st)
	id := newID()
	p := params(id, "fp", longLease, time.Hour)
	mustClaim(t, st, p, store.Claimed)
	mustClaim(t, peer, params(id, "fp", longLease, time.Hour), store.Running)
	mustBool(t, "Complete from peer with holder's token", complete(peer, id, p.Token, sampleResponse()), true)
	res := mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
	sameResponse(t, "claim after peer's Complete", res.Response, sampleResponse())
}

func (s *suite) testPing(t *testing.T) {
	st := s.newStore(t)
	if err := st.Ping(ctx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
