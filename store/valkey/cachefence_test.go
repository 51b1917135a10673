package valkey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCacheFrozenServerStopsHits: with a record in the replay cache, a
// frozen Valkey (SIGSTOP) keeps the connection, and valkey-go its cache,
// open until its keepalive gives up (seconds); nothing can invalidate the
// entry meanwhile. Once CacheFence has passed without an answer from
// Valkey, CachedReplay must not answer from memory: the fence PING fails
// and the caller claims, which fails closed (promise 3).
func TestCacheFrozenServerStopsHits(t *testing.T) {
	srv := valkeytest.Start(t)
	s := cacheStore(t, srv.Addr(), randomPrefix(), 1<<20)
	id, _ := completeOne(t, s, "k1", time.Hour)
	cached(t, s, id)
	if rec, res := cached(t, s, id); rec == nil || res != store.CacheHit {
		t.Fatalf("before the freeze: %+v %v, want a hit", rec, res)
	}

	srv.Pause()
	t.Cleanup(srv.Resume)
	// Whatever the cache last heard from Valkey, it heard it before the
	// freeze; after CacheFence it is too old to vouch for the entry.
	time.Sleep(valkey.CacheFence)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		rec, _, err := s.CachedReplay(ctx, id)
		cancel()
		if rec != nil {
			t.Fatalf("read %d with Valkey frozen: replayed %+v from the cache, want none", i, rec.Response)
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("read %d with Valkey frozen: err %v, want ErrUnavailable", i, err)
		}
	}

	srv.Resume()
	// A Get marks the record seen again, should the freeze have outlasted
	// the connection (and emptied the seen set with its cache).
	if _, err := s.Get(t.Context(), id); err != nil {
		t.Fatalf("Get after the resume: %v", err)
	}
	var rec *store.Record
	for deadline := time.Now().Add(10 * time.Second); rec == nil && time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		rec, _, _ = s.CachedReplay(ctx, id)
		cancel()
	}
	if rec == nil {
		t.Fatal("after the resume, the record is not replayed again")
	}
}
