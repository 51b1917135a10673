package valkey_test

import (
	"context"
	"strconv"
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
	warmToHit(t, s1, id)
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

// TestCacheClusterFailoverFromStalledPrimary is
// TestCacheSentinelFailoverFromStalledPrimary in a Cluster: a primary
// stalls, its replica takes over, and an instance that learned the new
// topology purges records that another instance read from the stalled
// primary. The fence PING reaches any node, so that instance must not
// answer those records from memory while their connection lingers.
func TestCacheClusterFailoverFromStalledPrimary(t *testing.T) {
	c := valkeytest.StartClusterWithReplicas(t, 3)
	prefix := randomPrefix()
	opts := valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix, CacheBytes: 1 << 20}
	s1, writer := newStore(t, opts), newStore(t, opts)
	var ids []store.Identity
	for i := 0; len(ids) < 3; i++ {
		if i == 64 {
			t.Fatal("64 keys, too few on primary 0")
		}
		id, _ := completeOne(t, writer, "k"+strconv.Itoa(i), time.Hour)
		if out, _ := c.Servers[0].CLI("EXISTS", writer.Key(id)); out != "1" {
			continue
		}
		warmToHit(t, s1, id)
		ids = append(ids, id)
	}
	if out, err := c.Servers[0].CLI("WAIT", "1", "5000"); err != nil || out != "1" {
		t.Fatalf("WAIT: %q %v", out, err)
	}
	c.Servers[0].Pause()
	t.Cleanup(c.Servers[0].Resume)
	if out, err := c.Replicas[0].CLI("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil || out != "OK" {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER: %q %v", out, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if role, _ := c.Replicas[0].CLI("ROLE"); strings.HasPrefix(role, "master") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica 0 not promoted in 15 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An instance started now learns the new topology.
	purger := newStore(t, valkey.Options{Addrs: []string{c.Servers[1].Addr()}, KeyPrefix: prefix})
	for _, id := range ids {
		if ok, err := purger.Delete(t.Context(), id); err != nil || !ok {
			t.Fatalf("Delete on the new primary: %v %v", ok, err)
		}
	}
	// valkey-go's own cache answers from the stalled node's connection
	// until the client refreshes its slots (a command to that node fails,
	// a fence PING among them): a Cluster promises no CacheFence bound,
	// only that nothing outlives that refresh, where the connection itself
	// lingers until its keepalive times out (2 ConnTimeouts, 6 s).
	purged := time.Now()
	for time.Since(purged) < 2*time.Second {
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			rec, res, _ := s1.CachedReplay(ctx, id)
			cancel()
			if rec != nil && time.Since(purged) > time.Second {
				t.Fatalf("%s purged on the new primary is still replayed %v after (%v)", id.Key, time.Since(purged), res)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// warmToHit has s see id's record completed (Get) and read it through
// the replay cache until it is answered from there, before a failover.
func warmToHit(t *testing.T, s *valkey.Store, id store.Identity) {
	t.Helper()
	if _, err := s.Get(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cached(t, s, id)
	}
	if rec, res := cached(t, s, id); rec == nil || res != store.CacheHit {
		t.Fatalf("before the failover: %+v %v, want a hit", rec, res)
	}
}
