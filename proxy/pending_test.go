package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// switchableStore fails every operation while down is set, as an
// unreachable Valkey would.
type switchableStore struct {
	store.Store
	down atomic.Bool
}

func (s *switchableStore) err(op string) error {
	return fmt.Errorf("%w: %s: connection refused", store.ErrUnavailable, op)
}

func (s *switchableStore) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if s.down.Load() {
		return store.ClaimResult{}, s.err("claim")
	}
	return s.Store.Claim(ctx, p)
}

func (s *switchableStore) Complete(ctx context.Context, id store.Identity, token string, r store.Response) (bool, error) {
	if s.down.Load() {
		return false, s.err("complete")
	}
	return s.Store.Complete(ctx, id, token, r)
}

func (s *switchableStore) Extend(ctx context.Context, id store.Identity, token string, d time.Duration) (bool, error) {
	if s.down.Load() {
		return false, s.err("extend")
	}
	return s.Store.Extend(ctx, id, token, d)
}

func (s *switchableStore) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	if s.down.Load() {
		return nil, s.err("get")
	}
	return s.Store.Get(ctx, id)
}

// TestStoreOutageLongerThanLeaseDoesNotRunTwice: the store goes away while
// the upstream runs and stays away past the lease. The client is answered
// within the store timeout, with 503 store-unavailable: the route takes
// over abandoned claims, so a response the store has not recorded is not
// handed out (answersOnlyRecorded). Once the store is back, neither the
// same instance nor another one that saw the outage takes the claim over:
// the response is recorded and replayed, and the upstream ran once.
func TestStoreOutageLongerThanLeaseDoesNotRunTwice(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	st := &switchableStore{Store: mem}
	var calls atomic.Int32
	entered := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		close(entered)
		st.down.Store(true) // the store fails while the upstream works
		created(w, r)
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	route := baseRoute()
	route.Lease = 300 * time.Millisecond
	route.WaitTimeout = time.Second
	pol, err := policy.New(route, nil)
	if err != nil {
		t.Fatal(err)
	}
	newFront := func() (*proxy.Proxy, *httptest.Server) {
		p, err := proxy.New(proxy.Options{Upstream: target, Store: st, StoreTimeout: 200 * time.Millisecond,
			Policy: func() *policy.Policy { return pol }})
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(p)
		t.Cleanup(front.Close)
		return p, front
	}
	pa, a := newFront()
	_, b := newFront()
	ha := &harness{t: t, front: a}
	hb := &harness{t: t, front: b}

	start := time.Now()
	if r := ha.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 503 || !strings.Contains(r.body, "store-unavailable") {
		t.Fatalf("first = %d %s, want 503 store-unavailable until the response is recorded", r.status, r.body)
	}
	<-entered
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the client waited %v for a response the store could not record", d)
	}
	// Instance B sees the outage too.
	if r := hb.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 503 {
		t.Fatalf("during the outage B answered %d, want 503", r.status)
	}
	time.Sleep(2 * route.Lease) // the outage outlasts the lease
	st.down.Store(false)
	// B is asked first, before A's background retry may have run: it must
	// not take over the claim whose lease ended during the outage.
	r := hb.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != 201 && r.status != 409 {
		t.Fatalf("B right after the outage: %d %s, want a replay or 409", r.status, r.body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := hb.do("POST", "/v1/orders", "alice", "k", "{}")
		if r.status == 201 && r.header.Get(proxy.ReplayedHeader) == "true" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still answers %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := ha.do("POST", "/v1/orders", "alice", "k", "{}"); r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("A: %d, want a replay", r.status)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := pa.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// TestPendingResponseIsRecordedBeforeTheNextClaim: on the instance that
// holds an unrecorded response, a retry records it first and replays it,
// without waiting for the background retry. The route takes over abandoned
// claims, so the first client is not handed the response before it is
// recorded: it gets 503 store-unavailable, and its retry the replay.
func TestPendingResponseIsRecordedBeforeTheNextClaim(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	st := &switchableStore{Store: mem}
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		st.down.Store(true)
		created(w, r)
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	route := baseRoute()
	route.Lease = 100 * time.Millisecond
	pol, _ := policy.New(route, nil)
	p, _ := proxy.New(proxy.Options{Upstream: target, Store: st, StoreTimeout: 100 * time.Millisecond,
		Policy: func() *policy.Policy { return pol }})
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, front: front}
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 503 || !strings.Contains(r.body, "store-unavailable") {
		t.Fatalf("first = %d %s, want 503 store-unavailable until the response is recorded", r.status, r.body)
	}
	time.Sleep(3 * route.Lease)
	st.down.Store(false)
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry = %d %v, want a replay", r.status, r.header)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}

// TestNoteStoreFailureHoldsTakeover: an instance that sent no request during
// an outage learns of it (the Valkey store reports a lost subscription) and
// so does not take over a claim whose lease ended meanwhile until the store
// has answered it for one lease; after that a dead holder's claim is taken
// over as usual.
func TestNoteStoreFailureHoldsTakeover(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		created(w, r)
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	route := baseRoute()
	route.Lease = 300 * time.Millisecond
	route.Concurrent = policy.ConcurrentConflict
	pol, _ := policy.New(route, nil)
	p, _ := proxy.New(proxy.Options{Upstream: target, Store: mem, Policy: func() *policy.Policy { return pol }})
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, front: front}

	// The same request, claimed by an instance that then died.
	r0, _ := http.NewRequest("POST", front.URL+"/v1/orders", strings.NewReader("{}"))
	r0.Header.Set("Content-Type", "application/json")
	fp := route.FingerprintOf(r0, []byte("{}"))
	id := store.Identity{Owner: "h:alice", Scope: "default", Key: "k"}
	if res, err := mem.Claim(context.Background(), store.ClaimParams{Identity: id, Fingerprint: fp, Token: "dead", Lease: route.Lease, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("setup claim: %+v %v", res, err)
	}
	p.NoteStoreFailure()
	time.Sleep(route.Lease + 50*time.Millisecond) // the dead holder's lease ends

	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 409 || r.header.Get("Retry-After") == "" {
		t.Fatalf("right after the disruption: %d %s, want 409 with Retry-After, not a takeover", r.status, r.body)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("upstream ran %d times during the hold", n)
	}
	time.Sleep(route.Lease + 50*time.Millisecond) // one lease after the store answered
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("after the hold: %d %s, want the takeover's forward", r.status, r.body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}
