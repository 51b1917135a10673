package valkey_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCacheSentinelFailoverFromStalledPrimary: Sentinel fails over from a
// primary that stalled (its connections stay open, nothing answers); a
// peer then purges a record on the new primary. The purge cannot reach a
// cache filled from the old primary, whose connection only closes once
// its keepalive times out, so that cache must not answer for the record
// while the fence PING reaches the new primary.
func TestCacheSentinelFailoverFromStalledPrimary(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	replica.WaitLinkUp(10 * time.Second)
	sen := valkeytest.StartSentinel(t, primary, "idemgate-stall")
	prefix := randomPrefix()
	opts := valkey.Options{Addrs: []string{sen.Addr()}, SentinelMaster: sen.MasterName, KeyPrefix: prefix, CacheBytes: 1 << 20}
	s1, s2 := newStore(t, opts), newStore(t, opts)
	id, _ := completeOne(t, s2, "k1", time.Hour)
	if _, err := primary.CLI("WAIT", "1", "5000"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Get(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cached(t, s1, id)
	}
	if rec, res := cached(t, s1, id); rec == nil || res != store.CacheHit {
		t.Fatalf("before the failover: %+v %v, want a hit", rec, res)
	}
	// The sentinel must know the replica before the primary stalls.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := sen.CLI("SENTINEL", "replicas", sen.MasterName)
		if strings.Contains(out, replica.Addr()[strings.LastIndex(replica.Addr(), ":")+1:]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sentinel never learned the replica")
		}
		time.Sleep(50 * time.Millisecond)
	}
	primary.Pause()
	t.Cleanup(primary.Resume)
	deadline = time.Now().Add(60 * time.Second)
	for ; ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no failover in 60 s")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		ok, err := s2.Delete(ctx, id)
		cancel()
		if err == nil && ok {
			break
		}
	}
	// s1 on the new primary too.
	for ; ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("s1 never reached the new primary")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		err := s1.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
	}
	purged := time.Now()
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		rec, res, err := s1.CachedReplay(ctx, id)
		cancel()
		if rec == nil {
			t.Logf("not replayed after %v (%v %v)", time.Since(purged), res, err)
			return
		}
		if time.Since(purged) > 500*time.Millisecond {
			t.Fatalf("the record purged on the new primary is still replayed from the stalled primary's cache %v after (%v)", time.Since(purged), res)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
