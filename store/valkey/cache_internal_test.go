package valkey

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
	vk "github.com/valkey-io/valkey-go"
)

func internalStore(t *testing.T, addr string, cacheBytes int64) *Store {
	t.Helper()
	return internalStoreLayout(t, addr, cacheBytes, 0)
}

// internalStoreLayout is internalStore writing records of layout (0: the
// default).
func internalStoreLayout(t *testing.T, addr string, cacheBytes int64, layout int) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := New(ctx, Options{Addrs: []string{addr}, KeyPrefix: "cache-test:", CacheBytes: cacheBytes, Layout: layout})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func rawClient(t *testing.T, addr string) vk.Client {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("raw client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func completeInternal(t *testing.T, s *Store, id store.Identity) {
	t.Helper()
	if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "f", Token: "t-" + id.Key, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if ok, err := s.Complete(t.Context(), id, "t-"+id.Key, store.Response{Status: 201, Body: []byte("created")}); err != nil || !ok {
		t.Fatalf("complete: %v %v", ok, err)
	}
}

func cachedInternal(t *testing.T, s *Store, id store.Identity) (*store.Record, store.CacheResult) {
	t.Helper()
	rec, res, err := s.CachedReplay(t.Context(), id)
	if err != nil {
		t.Fatalf("CachedReplay: %v", err)
	}
	return rec, res
}

// TestCacheBrokenConnectionFlushes: killing the store's
// connections drops everything they cached, so a record deleted while
// they were down (no invalidation can reach a dead connection) is read
// from the server again, not replayed from memory.
func TestCacheBrokenConnectionFlushes(t *testing.T) {
	srv := valkeytest.Start(t)
	s := internalStore(t, srv.Addr(), 1<<20)
	rc := rawClient(t, srv.Addr())
	id := store.Identity{Owner: "alice", Scope: "default", Key: "k1"}
	completeInternal(t, s, id)
	cachedInternal(t, s, id)
	if rec, res := cachedInternal(t, s, id); rec == nil || res != store.CacheHit {
		t.Fatalf("before the kill: %+v %v, want a hit", rec, res)
	}
	// Every connection of the store, the subscription's included (a RESP3
	// connection may carry both), by id: the raw client is not one.
	list, err := rc.Do(t.Context(), rc.B().ClientList().Build()).ToString()
	list = strings.TrimPrefix(list, "txt:") // RESP3 verbatim string
	if err != nil {
		t.Fatal(err)
	}
	f0 := s.seen.flushes.Load()
	killed := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.Contains(line, " name=idemgate ") {
			continue
		}
		idField, _, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(strings.TrimPrefix(idField, "id="), 10, 64)
		if err != nil {
			t.Fatalf("CLIENT LIST line %q: %v", line, err)
		}
		if err := rc.Do(t.Context(), rc.B().ClientKill().Id(n).Build()).Error(); err != nil {
			t.Fatalf("CLIENT KILL %s: %v", idField, err)
		}
		killed++
	}
	if killed == 0 {
		t.Fatalf("no idemgate connection in CLIENT LIST:\n%s", list)
	}
	// The client learns of the kill when its reader sees EOF; wait for
	// that (the flush it reports), not for a time.
	deadline := time.Now().Add(5 * time.Second)
	for s.seen.flushes.Load()-f0 < int64(killed) {
		if time.Now().After(deadline) {
			t.Fatalf("%d flushes reported for %d killed connections after 5 s", s.seen.flushes.Load()-f0, killed)
		}
		time.Sleep(time.Millisecond)
	}
	if err := rc.Do(t.Context(), rc.B().Del().Key(s.Key(id)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if rec, res := cachedInternal(t, s, id); rec != nil {
		t.Fatalf("after the kill and a delete: %+v %v, want no record", rec, res)
	}
	// Even asked to look (the key seen again), the cache has nothing stale.
	s.seen.add(s.Key(id))
	if rec, res := cachedInternal(t, s, id); rec != nil || res != store.CacheMiss {
		t.Fatalf("after the kill, a cached read: %+v %v, want a miss and no record", rec, res)
	}
}

// TestCacheNeverServesRunning: a record that runs (purged
// and claimed again since it was seen completed) is never returned by the
// cache, whether read from the server or held in the client cache, and
// its claim answers Running as without a cache.
func TestCacheNeverServesRunning(t *testing.T) {
	srv := valkeytest.Start(t)
	s := internalStore(t, srv.Addr(), 1<<20)
	peer := internalStore(t, srv.Addr(), 1<<20)
	id := store.Identity{Owner: "alice", Scope: "default", Key: "k1"}
	completeInternal(t, s, id)
	if ok, err := peer.Delete(t.Context(), id); err != nil || !ok {
		t.Fatalf("purge: %v %v", ok, err)
	}
	if res, err := peer.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "f", Token: "running", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("claim again: %+v %v", res, err)
	}
	s.seen.add(s.Key(id)) // as if seen completed just now: the cache is asked
	if rec, res := cachedInternal(t, s, id); rec != nil || res != store.CacheMiss {
		t.Fatalf("running record read: %+v %v, want a miss and no record", rec, res)
	}
	if rec, res := cachedInternal(t, s, id); rec != nil || res != store.CacheHit {
		t.Fatalf("running record held in the client cache: %+v %v, want a hit and no record", rec, res)
	}
	if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "f", Token: "other", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Running {
		t.Fatalf("claim: %+v %v, want running", res, err)
	}
	// It completes: the cache now answers the new completion, not nothing.
	if ok, err := peer.Complete(t.Context(), id, "running", store.Response{Status: 200, Body: []byte("second")}); err != nil || !ok {
		t.Fatalf("complete: %v %v", ok, err)
	}
	s.seen.add(s.Key(id))
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, _ := cachedInternal(t, s, id)
		if rec != nil {
			if string(rec.Response.Body) != "second" {
				t.Fatalf("cached record %q, want the second completion", rec.Response.Body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the completed record never came from the cache")
		}
		s.seen.add(s.Key(id)) // the invalidation of the running record may drop it again
	}
}

// TestSeenBounded: the set of keys seen completed never grows past its
// bound, whatever is completed, so CacheBytes bounds it too; a full set
// drops the key added longest ago.
func TestSeenBounded(t *testing.T) {
	sn := newSeen(10, 1<<20)
	for i := range 1000 {
		sn.add(strconv.Itoa(i))
		if sn.len() > 10 {
			t.Fatalf("%d keys after %d adds, bound 10", sn.len(), i+1)
		}
	}
	for i := range 1000 {
		if want := i >= 990; sn.has(strconv.Itoa(i)) != want {
			t.Fatalf("key %d seen %v after 1000 adds at a bound of 10: want the last 10 kept, the oldest dropped", i, !want)
		}
	}
	sn.onInvalidations(nil)
	if sn.len() != 0 || sn.flushes.Load() != 1 {
		t.Fatalf("after a flush: %d keys, %d flushes", sn.len(), sn.flushes.Load())
	}
	for _, conns := range []int{1, 2, 4} {
		eachConn, keys, decodedBytes := cacheSizes(32<<20, conns)
		if total := int64(eachConn*conns+keys*seenKeyBytes) + decodedBytes; total > 32<<20 {
			t.Fatalf("cacheSizes(32 MiB, %d) = %d per connection, %d keys, %d decoded bytes: %d bytes in all", conns, eachConn, keys, decodedBytes, total)
		}
	}
}

// TestSeenDecodedBounded: the decoded records kept for replays never take
// more than their share, a key dropped or flushed gives its share back,
// and a key no longer seen gets none.
func TestSeenDecodedBounded(t *testing.T) {
	sn := newSeen(100, 3000)
	for i := range 100 {
		k := strconv.Itoa(i)
		sn.add(k)
		sn.rememberNow(k, &decoded{size: 1000})
		if sn.decodedBytes > 3000 {
			t.Fatalf("%d decoded bytes after %d records, bound 3000", sn.decodedBytes, i+1)
		}
		if d, ok := sn.lookup(k); !ok || d == nil {
			t.Fatalf("the record just decoded for %s was not kept", k)
		}
	}
	sn.drop("99")
	if sn.decodedBytes != 2000 {
		t.Fatalf("%d decoded bytes after a drop, want 2000", sn.decodedBytes)
	}
	sn.rememberNow("gone", &decoded{size: 10})
	if _, ok := sn.lookup("gone"); ok || sn.decodedBytes != 2000 {
		t.Fatal("a key not seen got a decoded record")
	}
	sn.rememberNow("98", &decoded{size: 1000})
	sn.rememberNow("98", &decoded{size: 1000}) // replaced, not counted twice
	if sn.decodedBytes > 3000 {
		t.Fatalf("%d decoded bytes after a record was replaced, bound 3000", sn.decodedBytes)
	}
	sn.rememberNow("98", &decoded{size: 4000}) // larger than the whole share
	if d, _ := sn.lookup("98"); d == nil || d.size != 1000 || sn.decodedBytes > 3000 {
		t.Fatal("a record over the share replaced the one kept")
	}
	sn.onInvalidations(nil)
	if sn.decodedBytes != 0 {
		t.Fatalf("%d decoded bytes after a flush", sn.decodedBytes)
	}
}

// TestSeenRememberAfterInvalidation: a record decoded from a read that an
// invalidation of its key overtook is never remembered, even when a claim
// noted the key completed again before remember ran; the replays it would
// answer by itself would be the record as it was before the change.
func TestSeenRememberAfterInvalidation(t *testing.T) {
	sn := newSeen(100, 1<<20)
	sn.add("k")
	_, _, _, epoch := sn.lookupLayout("k") // before the read
	sn.drop("k")                           // its invalidation
	sn.add("k")                            // a claim saw it completed again
	sn.remember("k", &decoded{size: 10}, epoch)
	if d, ok := sn.lookup("k"); !ok || d != nil {
		t.Fatalf("lookup after an overtaken read: %+v %v, want seen with nothing decoded", d, ok)
	}
	// A key the full set lets go of to make room changed nothing: a read
	// of another key in the meantime is still remembered.
	full := newSeen(2, 1<<20)
	full.add("a")
	full.add("b")
	_, _, _, epoch = full.lookupLayout("b")
	full.add("c") // a goes
	full.remember("b", &decoded{size: 10}, epoch)
	if d, _ := full.lookup("b"); d == nil {
		t.Fatal("a read was not remembered after an unrelated key made room")
	}
}

// TestCachedReplayDecodesOnce: replays of a cached record hand out the
// record decoded on the first hit, and once the record changes (purged,
// then completed again with another response) the new response, never
// the one decoded before; for records of either layout.
func TestCachedReplayDecodesOnce(t *testing.T) {
	srv := valkeytest.Start(t)
	for _, layout := range []int{Layout3, Layout4} {
		t.Run("layout"+strconv.Itoa(layout), func(t *testing.T) {
			id := store.Identity{Owner: "o", Scope: "s", Key: "decode-once-" + strconv.Itoa(layout)}
			cachedReplayDecodesOnce(t, internalStoreLayout(t, srv.Addr(), 32<<20, layout), id)
		})
	}
}

// TestCachedReplayDecodesOnceInCluster: in a Cluster every hit asks
// valkey-go's cache (seen.verify), but the record is decoded once while
// the cache returns the reply it was decoded from, and decoded again
// once the record changed.
func TestCachedReplayDecodesOnceInCluster(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	for _, layout := range []int{Layout3, Layout5} {
		t.Run("layout"+strconv.Itoa(layout), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			s, err := New(ctx, Options{Addrs: c.Addrs(), KeyPrefix: "cache-test:", CacheBytes: 32 << 20, Layout: layout})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if !s.seen.verify {
				t.Fatal("a Cluster store answers decoded records without asking valkey-go's cache")
			}
			id := store.Identity{Owner: "o", Scope: "s", Key: "decode-once-cluster-" + strconv.Itoa(layout)}
			cachedReplayDecodesOnce(t, s, id)
		})
	}
}

func cachedReplayDecodesOnce(t *testing.T, s *Store, id store.Identity) {
	completeInternal(t, s, id)
	first, _ := cachedInternal(t, s, id) // a miss: read from the server
	var hits []*store.Record
	for range 3 {
		rec, res := cachedInternal(t, s, id)
		if res != store.CacheHit || rec == nil || string(rec.Response.Body) != "created" {
			t.Fatalf("replay from the cache: %v %+v", res, rec)
		}
		hits = append(hits, rec)
	}
	if first == nil || hits[1] != hits[0] || hits[2] != hits[0] {
		t.Fatal("each cache hit decoded the record again")
	}
	if ok, err := s.Delete(t.Context(), id); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "f2", Token: "t2", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("claim after the purge: %+v %v", res, err)
	}
	if ok, err := s.Complete(t.Context(), id, "t2", store.Response{Status: 200, Body: []byte("second")}); err != nil || !ok {
		t.Fatalf("complete: %v %v", ok, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, _ := cachedInternal(t, s, id)
		if rec != nil && rec.Fingerprint == "f2" {
			if rec.Response.Status != 200 || string(rec.Response.Body) != "second" {
				t.Fatalf("the new record came with the old response: %d %q", rec.Response.Status, rec.Response.Body)
			}
			break
		}
		if rec != nil && (rec.Fingerprint != "f" || string(rec.Response.Body) != "created") {
			t.Fatalf("a mix of the two records: %+v", rec)
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache still answers the purged record after 5 s")
		}
		runtime.Gosched()
	}
}

// has reports whether key was seen.
func (s *seen) has(key string) bool {
	_, ok := s.lookup(key)
	return ok
}

// len is the number of keys seen.
func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// lookup reports whether key was seen, and its decoded record if any.
func (s *seen) lookup(key string) (*decoded, bool) {
	d, _, ok, _ := s.lookupLayout(key)
	return d, ok
}

// rememberNow is remember with the epoch as it is now.
func (s *seen) rememberNow(key string, d *decoded) {
	_, _, _, epoch := s.lookupLayout(key)
	s.remember(key, d, epoch)
}

// BenchmarkSeenAddFull is what a fresh key costs the seen set at its
// bound (every key new, one dropped for it), at the size 32 MiB of
// cache_bytes gives it, with the record keys' length.
func BenchmarkSeenAddFull(b *testing.B) {
	_, n, _ := cacheSizes(32<<20, DefaultConnections)
	sn := newSeen(n, 1<<20)
	keys := make([]string, 4*n)
	for i := range keys {
		keys[i] = fmt.Sprintf("idemgate:{%064x}", i)
	}
	for _, k := range keys[:n] {
		sn.addLayout(k, true)
	}
	b.ReportAllocs()
	i := n
	for b.Loop() {
		sn.addLayout(keys[i%len(keys)], true)
		i++
	}
}
