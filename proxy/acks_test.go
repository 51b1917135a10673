package proxy_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
)

// ackStore acts like the Valkey store with acks on, over a memory store:
// a claim while claimNotAcked is set is written but answered
// ErrNotAcknowledged; a Complete before refuseUntil is answered
// ErrNotAcknowledged after it was applied (lose false) or without applying
// it, as a failover that lost it would leave the record (lose true); a
// Complete repeating the completing token answers true (store contract,
// rule 3's exception).
type ackStore struct {
	store.Store
	claimNotAcked atomic.Bool
	refuseUntil   atomic.Int64 // unix nanoseconds
	lose          bool

	mu          sync.Mutex
	completedBy map[store.Identity]string
	releases    atomic.Int32
	lostExtends atomic.Int32
	logs        *syncbuf.Buffer
	lastID      atomic.Pointer[store.Identity]
}

func notAcked(op string) error {
	return fmt.Errorf("fake: %s: %w: 0 of 1 replicas", op, store.ErrNotAcknowledged)
}

func (s *ackStore) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if isOwnerRecord(p.Identity) {
		return s.Store.Claim(ctx, p)
	}
	id := p.Identity
	s.lastID.Store(&id)
	res, err := s.Store.Claim(ctx, p)
	if err == nil && res.State == store.Claimed && s.claimNotAcked.Load() {
		return store.ClaimResult{}, notAcked("claim")
	}
	return res, err
}

func (s *ackStore) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	s.releases.Add(1)
	return s.Store.Release(ctx, id, token)
}

func (s *ackStore) Extend(ctx context.Context, id store.Identity, token string, d time.Duration) (bool, error) {
	ok, err := s.Store.Extend(ctx, id, token, d)
	if err == nil && !ok {
		s.lostExtends.Add(1)
	}
	return ok, err
}

func (s *ackStore) Complete(ctx context.Context, id store.Identity, token string, r store.Response) (bool, error) {
	if isOwnerRecord(id) {
		return s.Store.Complete(ctx, id, token, r)
	}
	refusing := time.Now().UnixNano() < s.refuseUntil.Load()
	if refusing && s.lose {
		return false, notAcked("complete")
	}
	s.mu.Lock()
	repeat := s.completedBy[id] == token
	s.mu.Unlock()
	if repeat {
		if refusing {
			return false, notAcked("complete")
		}
		return true, nil
	}
	ok, err := s.Store.Complete(ctx, id, token, r)
	if err != nil || !ok {
		return ok, err
	}
	s.mu.Lock()
	s.completedBy[id] = token
	s.mu.Unlock()
	if refusing {
		return false, notAcked("complete")
	}
	return true, nil
}

func withAckStore(st *ackStore, lease time.Duration) option {
	return func(o *proxy.Options, r *policy.Route, _ *[]policy.Route) {
		st.logs = &syncbuf.Buffer{}
		o.Logger = slog.New(slog.NewJSONHandler(st.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		st.Store = o.Store
		st.completedBy = map[store.Identity]string{}
		o.Store = st
		o.StoreTimeout = 200 * time.Millisecond
		r.Lease = lease
	}
}

// A claim the replicas did not acknowledge is not forwarded: 503
// store-unavailable, and the claim is released so a retry can go once the
// replicas are back.
func TestClaimNotAcknowledgedIsNotForwarded(t *testing.T) {
	st := &ackStore{}
	h := newHarness(t, created, withAckStore(st, 2*time.Second))
	st.claimNotAcked.Store(true)
	r := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != 503 || !strings.Contains(r.body, "store-unavailable") {
		t.Fatalf("claim not acknowledged: %d %s, want 503 store-unavailable", r.status, r.body)
	}
	if n := h.up.count("/v1/orders"); n != 0 {
		t.Fatalf("upstream called %d times for a claim not acknowledged", n)
	}
	if st.releases.Load() != 1 {
		t.Fatalf("releases = %d, want 1", st.releases.Load())
	}
	if rec, err := st.Get(t.Context(), *st.lastID.Load()); err != nil || rec != nil {
		t.Fatalf("record after the refused claim = %+v, %v; want released", rec, err)
	}
	st.claimNotAcked.Store(false)
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 {
		t.Fatalf("once acknowledged: %d %s", r.status, r.body)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// A completion lost by a failover (not acknowledged, then gone): the client
// is answered within the store timeout (503 store-unavailable: the route
// takes over abandoned claims, so a response not recorded is withheld), the
// record stays running with its lease extended well past its first end, a
// retry meanwhile waits instead of taking over, and the background repeat
// records the response, which the retry replays.
func TestCompletionNotAcknowledgedAndLost(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := &ackStore{lose: true}
	h := newHarness(t, created, withAckStore(st, lease))
	st.refuseUntil.Store(time.Now().Add(time.Hour).UnixNano())
	start := time.Now()
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 503 || !strings.Contains(r.body, "store-unavailable") {
		t.Fatalf("first: %d %s, want 503 store-unavailable until the response is recorded", r.status, r.body)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the client waited %v for a completion that was not acknowledged", d)
	}
	id := *st.lastID.Load()
	time.Sleep(3 * lease) // three leases: only the heartbeat keeps the claim
	rec, err := st.Get(t.Context(), id)
	if err != nil || rec == nil || rec.State != store.Running || !rec.LeaseEnd.After(time.Now()) {
		t.Fatalf("record 3 leases later = %+v, %v; want running within its lease (heartbeat kept), so no instance takes it over", rec, err)
	}
	// A retry through this instance records the pending response first,
	// which is still not acknowledged: it fails closed.
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 503 || !strings.Contains(r.body, "store-unavailable") {
		t.Fatalf("retry while the completion is not acknowledged: %d %s, want 503 store-unavailable", r.status, r.body)
	}
	st.refuseUntil.Store(0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.do("POST", "/v1/orders", "alice", "k", "{}")
		if r.status == 201 && r.header.Get(proxy.ReplayedHeader) == "true" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry 5s after the replicas are back: %d %s, want a replay", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// A completion made but not acknowledged: the record is completed on the
// primary, so Extend finds it not running; the heartbeat goes on anyway and
// the repeated Complete re-confirms the record instead of reporting the
// claim lost. The acknowledgements stay away longer than the store timeout,
// so the client of this takeover route gets 503 store-unavailable.
func TestCompletionNotAcknowledgedIsReconfirmed(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := &ackStore{}
	h := newHarness(t, created, withAckStore(st, lease))
	st.refuseUntil.Store(time.Now().Add(2 * lease).UnixNano())
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 503 || !strings.Contains(r.body, "store-unavailable") {
		t.Fatalf("first: %d %s, want 503 store-unavailable until the response is recorded", r.status, r.body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(st.logs.String(), "recorded a response after a store outage") {
		if time.Now().After(deadline) {
			t.Fatalf("response never re-confirmed; logs:\n%s", st.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := st.logs.String()
	if strings.Contains(logs, "claim lost") || strings.Contains(logs, "lease extension failed") {
		t.Fatalf("a re-confirmed completion logged a lost claim or a failed extension:\n%s", logs)
	}
	if st.lostExtends.Load() == 0 {
		t.Fatal("the heartbeat never ran while the completion waited for its acknowledgement")
	}
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %s, want a replay", r.status, r.body)
	}
}

var _ http.Handler = (*proxy.Proxy)(nil)
