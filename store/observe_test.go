package store_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

type ctxKey struct{}

// recorder is a store.Observer that keeps every call, and checks that End
// gets back what Start returned.
type recorder struct {
	mu    sync.Mutex
	calls []store.Call
	outs  []store.Outcome
}

func (r *recorder) Start(ctx context.Context, c store.Call) (context.Context, any) {
	return context.WithValue(ctx, ctxKey{}, c.Op), c.Op
}

func (r *recorder) End(c store.Call, started any, o store.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if started != c.Op {
		panic("End got another call's started value")
	}
	r.calls, r.outs = append(r.calls, c), append(r.outs, o)
}

func (r *recorder) last(t *testing.T, op store.Op) (store.Call, store.Outcome) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 || r.calls[len(r.calls)-1].Op != op {
		t.Fatalf("last observed call = %+v, want %v", r.calls, op)
	}
	return r.calls[len(r.calls)-1], r.outs[len(r.outs)-1]
}

// TestObserveReportsEveryOperation runs every operation through
// store.Observe on a memory store and checks what the observer is told:
// the operation, the identity (the resource's owner and scope for
// Tombstone) and the outcome the caller got.
func TestObserveReportsEveryOperation(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	rec := &recorder{}
	s := store.Observe(mem, rec)
	ctx := context.Background()
	id := store.Identity{Owner: "o", Scope: "s", Key: "k"}
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour}

	if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	if c, o := rec.last(t, store.OpClaim); c.Identity != id || o.State != store.Claimed || o.Err != nil {
		t.Fatalf("observed Claim %+v %+v", c, o)
	}
	if ok, err := s.Extend(ctx, id, "t", time.Minute); !ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	if _, o := rec.last(t, store.OpExtend); !o.Acted {
		t.Fatalf("observed Extend %+v, want acted", o)
	}
	resp := store.Response{Status: 201, Header: http.Header{"Location": {"/r/1"}}}
	if ok, err := s.Complete(ctx, id, "t", resp); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	rec.last(t, store.OpComplete)
	if r, err := s.Get(ctx, id); err != nil || r == nil {
		t.Fatalf("Get = %+v, %v", r, err)
	}
	if _, o := rec.last(t, store.OpGet); o.State != store.Completed {
		t.Fatalf("observed Get %+v, want completed", o)
	}
	if err := s.Index(ctx, "/r/1", id); err != nil {
		t.Fatal(err)
	}
	rec.last(t, store.OpIndex)
	if n, err := s.Tombstone(ctx, store.Resource{Owner: "o", Scope: "s", Path: "/r/1"}); n != 1 || err != nil {
		t.Fatalf("Tombstone = %d, %v", n, err)
	}
	if c, o := rec.last(t, store.OpTombstone); c.Identity != (store.Identity{Owner: "o", Scope: "s"}) || o.Count != 1 {
		t.Fatalf("observed Tombstone %+v %+v", c, o)
	}
	if ok, err := s.Release(ctx, id, "t"); ok || err != nil {
		t.Fatalf("Release of a tombstone = %v, %v", ok, err)
	}
	if _, o := rec.last(t, store.OpRelease); o.Acted {
		t.Fatalf("observed Release %+v, want not acted", o)
	}
	if ok, err := s.Delete(ctx, id); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	rec.last(t, store.OpDelete)
	if r, err := s.Get(ctx, id); r != nil || err != nil {
		t.Fatalf("Get after Delete = %+v, %v", r, err)
	}
	if _, o := rec.last(t, store.OpGet); o.State != store.Absent {
		t.Fatalf("observed Get of nothing %+v, want absent", o)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	rec.last(t, store.OpPing)
	if r, res, err := store.CachedReplayOf(ctx, s, id); r != nil || res != store.CacheSkipped || err != nil {
		t.Fatalf("CachedReplayOf a memory store = %v, %v, %v", r, res, err)
	}
	if _, o := rec.last(t, store.OpCachedReplay); o.Cache != store.CacheSkipped {
		t.Fatalf("observed CachedReplay %+v", o)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Claim(done, p); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Claim with a done ctx = %v", err)
	}
	if _, o := rec.last(t, store.OpClaim); !errors.Is(o.Err, store.ErrUnavailable) {
		t.Fatalf("observed Claim %+v, want the caller's error", o)
	}
}

// TestDeferWithNothingBehind: a store.Defer whose target fails answers
// every operation with that error, Watch with a closed channel,
// CachedReplay with CacheSkipped, and forwards once the target is there.
func TestDeferWithNothingBehind(t *testing.T) {
	var (
		mu     sync.Mutex
		target store.Store
	)
	down := errors.New("not connected")
	s := store.Defer(func() (store.Store, error) {
		mu.Lock()
		defer mu.Unlock()
		if target == nil {
			return nil, errors.Join(down, store.ErrUnavailable)
		}
		return target, nil
	})
	ctx := context.Background()
	id := store.Identity{Owner: "o", Scope: "s", Key: "k"}
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute}
	if _, err := s.Claim(ctx, p); !errors.Is(err, down) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Claim before = %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, down) {
		t.Fatalf("Ping before = %v", err)
	}
	ch, stop := s.Watch(id)
	select {
	case <-ch:
	default:
		t.Fatal("Watch before: channel not closed")
	}
	stop()
	if r, res, err := store.CachedReplayOf(ctx, s, id); r != nil || res != store.CacheSkipped || err != nil {
		t.Fatalf("CachedReplay before = %v, %v, %v", r, res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close before = %v", err)
	}
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	mu.Lock()
	target = mem
	mu.Unlock()
	if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim after = %+v, %v", res, err)
	}
	if r, err := mem.Get(ctx, id); err != nil || r == nil || r.State != store.Running {
		t.Fatalf("the claim did not reach the store behind: %+v, %v", r, err)
	}
}
