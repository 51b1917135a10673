package valkey_test

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// cmdCalls reads INFO commandstats: calls per command name, subcommands
// as "client|caching", commands run inside scripts included.
func cmdCalls(t *testing.T, c vk.Client) map[string]int64 {
	t.Helper()
	info, err := c.Do(t.Context(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return valkeytest.CommandCalls(info)
}

// commandMeter counts the commands the stores under test send between two
// reads of INFO commandstats: every command but the meter's own INFO and
// the clients' idle PINGs.
type commandMeter struct {
	t      *testing.T
	c      vk.Client
	before map[string]int64
}

func newMeter(t *testing.T, addr string) *commandMeter {
	m := &commandMeter{t: t, c: raw(t, addr)}
	m.before = cmdCalls(t, m.c)
	return m
}

// since returns the commands since the last call (or newMeter), by name.
func (m *commandMeter) since() map[string]int64 {
	after := cmdCalls(m.t, m.c)
	d := map[string]int64{}
	for name, n := range after {
		// A connection's handshake (HELLO, CLIENT SETINFO) is no
		// operation's: valkey-go may open a connection inside the window
		// measured (a full run saw TestLayout4FreshKeyIsOneSet count one).
		// CLIENT CACHING, part of a cached read, is counted.
		switch name {
		case "info", "ping", "hello", "client|setinfo", "client|setname":
			continue
		}
		if n -= m.before[name]; n != 0 {
			d[name] = n
		}
	}
	m.before = after
	return d
}

// roundTrips counts what a client sent itself in d: scripts, and the
// MULTI .. EXEC of a cached read (one round trip, pipelined).
func roundTrips(d map[string]int64) int64 {
	return d["evalsha"] + d["evalsha_ro"] + d["eval"] + d["eval_ro"] + d["exec"]
}

func cacheStore(t *testing.T, addr, prefix string, cacheBytes int64) *valkey.Store {
	return newStore(t, valkey.Options{Addrs: []string{addr}, KeyPrefix: prefix, CacheBytes: cacheBytes})
}

func completeOne(t *testing.T, s store.Store, key string, retention time.Duration) (store.Identity, store.Response) {
	t.Helper()
	id := store.Identity{Owner: "alice", Scope: "default", Key: key}
	resp := store.Response{Status: 201, Body: []byte(`{"id":"` + key + `"}` + "\x00\xff"),
		Header:  http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}},
		Trailer: http.Header{"Checksum": {"x"}}}
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp-" + key, Recipe: "v=hs1",
		Token: "tok-" + key, Lease: 10 * time.Second, Retention: retention})
	if err != nil || res.State != store.Claimed {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
	if ok, err := s.Complete(t.Context(), id, "tok-"+key, resp); err != nil || !ok {
		t.Fatalf("complete %s: %v %v", key, ok, err)
	}
	return id, resp
}

func cached(t *testing.T, s *valkey.Store, id store.Identity) (*store.Record, store.CacheResult) {
	t.Helper()
	rec, res, err := s.CachedReplay(t.Context(), id)
	if err != nil {
		t.Fatalf("CachedReplay: %v", err)
	}
	return rec, res
}

// TestCacheReplayCostsNoCommand: once read, a completed
// record is replayed from the cache with no command at all, and it is the
// record Claim and Get answer, field for field.
func TestCacheReplayCostsNoCommand(t *testing.T) {
	srv := valkeytest.Start(t)
	s := cacheStore(t, srv.Addr(), randomPrefix(), 1<<20)
	completeOne(t, s, "warm", time.Hour) // loads the scripts
	id, _ := completeOne(t, s, "k1", time.Hour)
	m := newMeter(t, srv.Addr())

	first, res := cached(t, s, id)
	if first == nil || res != store.CacheMiss {
		t.Fatalf("first cached read: %+v %v, want the record from the server (miss)", first, res)
	}
	if d := m.since(); roundTrips(d) != 1 || d["hgetall"] != 1 {
		t.Fatalf("first cached read sent %v, want one MULTI..EXEC round trip with one HGETALL", d)
	}
	for range 3 {
		rec, res := cached(t, s, id)
		if rec == nil || res != store.CacheHit {
			t.Fatalf("cached read: %+v %v, want a hit", rec, res)
		}
		if !reflect.DeepEqual(rec, first) {
			t.Fatalf("hit %+v differs from the read %+v", rec, first)
		}
	}
	if d := m.since(); len(d) != 0 {
		t.Fatalf("cache hits sent %v, want no command", d)
	}
	got, err := s.Get(t.Context(), id)
	if err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("Get = %+v, %v; cached %+v", got, err, first)
	}
	cl, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp-k1", Recipe: "v=hs1", Token: "t2", Lease: time.Second, Retention: time.Hour})
	if err != nil || cl.State != store.Completed || cl.Fingerprint != first.Fingerprint || cl.Recipe != first.Recipe ||
		!reflect.DeepEqual(cl.Response, first.Response) {
		t.Fatalf("Claim = %+v, %v; cached %+v", cl, err, first)
	}
}

// TestCacheFreshKeyCostsTwoRoundTrips: asking the cache for
// a key this instance has not seen completed sends nothing, so a fresh
// request stays claim + complete.
func TestCacheFreshKeyCostsTwoRoundTrips(t *testing.T) {
	srv := valkeytest.Start(t)
	s := cacheStore(t, srv.Addr(), randomPrefix(), 1<<20)
	completeOne(t, s, "warm", time.Hour)
	m := newMeter(t, srv.Addr())
	for i := range 5 {
		key := "fresh-" + strconv.Itoa(i)
		id := store.Identity{Owner: "alice", Scope: "default", Key: key}
		if rec, res := cached(t, s, id); rec != nil || res != store.CacheSkipped {
			t.Fatalf("fresh key: %+v %v, want skipped", rec, res)
		}
		completeOne(t, s, key, time.Hour)
		if d := m.since(); roundTrips(d) != 2 || d["evalsha"] != 2 || d["hgetall"] != 0 || d["client|caching"] != 0 {
			t.Fatalf("fresh request %d sent %v, want exactly 2 round trips (claim, complete)", i, d)
		}
	}
}

// TestCachePurgeReachesPeer: two instances have a record
// cached; a purge through one stops the other's cached replays within
// 100 ms of the purge's return (Valkey's invalidation), and its own.
func TestCachePurgeReachesPeer(t *testing.T) {
	srv := valkeytest.Start(t)
	prefix := randomPrefix()
	s1 := cacheStore(t, srv.Addr(), prefix, 1<<20)
	s2 := cacheStore(t, srv.Addr(), prefix, 1<<20)
	id, _ := completeOne(t, s1, "k1", time.Hour)
	if _, err := s2.Get(t.Context(), id); err != nil { // s2 sees it completed, as a replay through it would
		t.Fatal(err)
	}
	for _, s := range []*valkey.Store{s1, s2} {
		cached(t, s, id)
		if rec, res := cached(t, s, id); rec == nil || res != store.CacheHit {
			t.Fatalf("before the purge: %+v %v, want a hit", rec, res)
		}
	}
	if ok, err := s1.Delete(t.Context(), id); err != nil || !ok {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for i, s := range []*valkey.Store{s2, s1} {
		for {
			rec, _ := cached(t, s, id)
			if rec == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %d still replays the purged record from its cache 100 ms after the purge", 2-i)
			}
		}
	}
	if res, err := s2.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp-k1", Token: "new", Lease: time.Second, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("claim after the purge: %+v %v, want claimed", res, err)
	}
}

// TestCacheExpiry: past its retention end a record is not
// replayed from the cache.
func TestCacheExpiry(t *testing.T) {
	srv := valkeytest.Start(t)
	s := cacheStore(t, srv.Addr(), randomPrefix(), 1<<20)
	rc := raw(t, srv.Addr())
	// The record must still be there for the two reads below (a miss that
	// caches it, then a hit): a 300 ms retention left a loaded machine too
	// little time for them. The test waits for the end on the server's
	// clock anyway.
	id, _ := completeOne(t, s, "k1", 2*time.Second)
	rec, _ := cached(t, s, id)
	if rec == nil {
		t.Fatal("no record before its end")
	}
	if rec, res := cached(t, s, id); rec == nil || res != store.CacheHit {
		t.Fatalf("before its end: %+v %v, want a hit", rec, res)
	}
	end := rec.RetentionEnd
	for serverTime(t, rc).Before(end) {
		time.Sleep(10 * time.Millisecond) // polls the server's clock; the assertion is after the end
	}
	if rec, res := cached(t, s, id); rec != nil {
		t.Fatalf("after its end (%v): %+v %v, want no record", end, rec, res)
	}
}

// TestCacheOff: CacheBytes 0 makes no cached read: every
// replay is a claim, and nothing tracks keys.
func TestCacheOff(t *testing.T) {
	srv := valkeytest.Start(t)
	s := cacheStore(t, srv.Addr(), randomPrefix(), 0)
	id, _ := completeOne(t, s, "k1", time.Hour)
	m := newMeter(t, srv.Addr())
	for range 3 {
		if rec, res := cached(t, s, id); rec != nil || res != store.CacheSkipped {
			t.Fatalf("cache off: %+v %v, want skipped", rec, res)
		}
		res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp-k1", Token: "t", Lease: time.Second, Retention: time.Hour})
		if err != nil || res.State != store.Completed {
			t.Fatalf("replay claim: %+v %v", res, err)
		}
	}
	if d := m.since(); d["evalsha"] != 3 || d["exec"] != 0 || d["hgetall"] != 0 || d["client|caching"] != 0 {
		t.Fatalf("3 replays with the cache off sent %v, want 3 claims and no cached read", d)
	}
	if _, err := valkey.New(t.Context(), valkey.Options{Addrs: []string{srv.Addr()}, CacheBytes: -1}); err == nil {
		t.Fatal("CacheBytes -1 accepted")
	}
}

// TestCacheBounded: many records through a small cache: what
// is answered from memory never exceeds CacheBytes, and every answer is
// the right record.
func TestCacheBounded(t *testing.T) {
	srv := valkeytest.Start(t)
	const cacheBytes = 64 << 10
	const n, bodySize = 200, 4 << 10
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), CacheBytes: cacheBytes})
	ids := make([]store.Identity, n)
	bodies := make([][]byte, n)
	for i := range n {
		ids[i] = store.Identity{Owner: "alice", Scope: "default", Key: "k" + strconv.Itoa(i)}
		bodies[i] = make([]byte, bodySize)
		_, _ = rand.Read(bodies[i]) // incompressible: the stored size is the body's
		tok := "t" + strconv.Itoa(i)
		if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: ids[i], Fingerprint: "f", Token: tok, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
			t.Fatalf("claim %d: %+v %v", i, res, err)
		}
		if ok, err := s.Complete(t.Context(), ids[i], tok, store.Response{Status: 201, Body: bodies[i]}); err != nil || !ok {
			t.Fatalf("complete %d: %v %v", i, ok, err)
		}
	}
	// A second instance that has seen 40 of them completed (Get) reads
	// them in order, then backwards: going back, it hits what its cache
	// still holds, the most recent first, until the first miss.
	const w = 40
	peer := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: s.KeyPrefix(), CacheBytes: cacheBytes})
	for i := range w {
		if _, err := peer.Get(t.Context(), ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	check := func(i int) store.CacheResult {
		rec, res := cached(t, peer, ids[i])
		if rec == nil || !bytes.Equal(rec.Response.Body, bodies[i]) {
			t.Fatalf("record %d: %v, not its record", i, res)
		}
		return res
	}
	for i := range w {
		check(i)
	}
	hits := 0
	for i := w - 1; i >= 0; i-- {
		if check(i) == store.CacheHit {
			hits++
		}
	}
	if hits*bodySize > cacheBytes {
		t.Fatalf("%d hits of %d-byte records: more than the %d bytes of the cache were held", hits, bodySize, cacheBytes)
	}
	if hits == 0 {
		t.Fatalf("no hit going back over %d records with a %d-byte cache", w, cacheBytes)
	}
	t.Logf("%d of %d records held by a %d KiB cache", hits, w, cacheBytes>>10)
}

// TestContractStandaloneCached: client tracking on every connection
// changes nothing the store contract says.
func TestContractStandaloneCached(t *testing.T) {
	srv := valkeytest.Start(t)
	addrs := []string{srv.Addr()}
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, _ *storetest.Clock) store.Store {
			return newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: randomPrefix(), CacheBytes: 1 << 20})
		},
		NewPeer: func(t *testing.T, s store.Store, _ *storetest.Clock) store.Store {
			return newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: s.(*valkey.Store).KeyPrefix(), CacheBytes: 1 << 20})
		},
	})
}

// purgeReachesPeer completes n records through s1, has s1 and s2 cache
// them, purges them through s1 and checks that s2 stops replaying each
// within 100 ms of its purge's return.
func purgeReachesPeer(t *testing.T, s1, s2 *valkey.Store, n int) {
	t.Helper()
	ids := make([]store.Identity, n)
	for i := range n {
		ids[i], _ = completeOne(t, s1, "purge-"+strconv.Itoa(i), time.Hour)
		if _, err := s2.Get(t.Context(), ids[i]); err != nil {
			t.Fatal(err)
		}
		for _, s := range []*valkey.Store{s1, s2} {
			cached(t, s, ids[i])
			if rec, res := cached(t, s, ids[i]); rec == nil || res != store.CacheHit {
				t.Fatalf("record %d before the purge: %+v %v, want a hit", i, rec, res)
			}
		}
	}
	for i, id := range ids {
		if ok, err := s1.Delete(t.Context(), id); err != nil || !ok {
			t.Fatalf("Delete %d: %v %v", i, ok, err)
		}
		deadline := time.Now().Add(100 * time.Millisecond)
		for {
			rec, _ := cached(t, s2, id)
			if rec == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("record %d still replayed from the peer's cache 100 ms after its purge", i)
			}
		}
	}
}

// TestCacheCluster: in Cluster each node tracks the keys of its slots and
// invalidates them; records spread over every node behave as on one.
func TestCacheCluster(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	prefix := randomPrefix()
	s1 := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix, CacheBytes: 1 << 20})
	s2 := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix, CacheBytes: 1 << 20})
	purgeReachesPeer(t, s1, s2, 12)
}

// TestCacheSentinel: through Sentinel the cache reads the primary the
// sentinels name, and a purge reaches the peer's cache.
func TestCacheSentinel(t *testing.T) {
	srv := valkeytest.Start(t)
	sen := valkeytest.StartSentinel(t, srv, "idemgate-test")
	prefix := randomPrefix()
	opts := valkey.Options{Addrs: []string{sen.Addr()}, SentinelMaster: sen.MasterName, KeyPrefix: prefix, CacheBytes: 1 << 20}
	purgeReachesPeer(t, newStore(t, opts), newStore(t, opts), 3)
}

// TestCacheWithAcks: acknowledged writes and the cache together: claims
// and completions still wait for the replica, replays come from the cache,
// and a purge still invalidates it.
func TestCacheWithAcks(t *testing.T) {
	primary := valkeytest.Start(t)
	valkeytest.StartReplica(t, primary.Addr())
	var acks ackLog
	prefix := randomPrefix()
	opts := valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: prefix,
		Acks: valkey.Acks{Replicas: 1, Timeout: liveAckTimeout}, OnAck: acks.on, CacheBytes: 1 << 20}
	s1 := newStore(t, opts)
	pingEventually(t, s1, 10*time.Second)
	purgeReachesPeer(t, s1, newStore(t, opts), 3)
	if got := acks.String(); !strings.Contains(got, "claim:true") || !strings.Contains(got, "complete:true") || strings.Contains(got, ":false") {
		t.Fatalf("acknowledgements %s, want every claim and completion acknowledged", got)
	}
}
