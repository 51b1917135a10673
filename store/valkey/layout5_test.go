package valkey_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"

	"github.com/idemgate/idemgate/store/storetest"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestContractLayout5 runs the contract on records of layout 5, in
// Cluster mode, and on a fleet mid-upgrade: a store writing layout 5
// beside peers writing 4 or 3, and the other way round, every record read,
// waited on and completed by both (docs/protocol.md, "Rolling upgrade to
// layout 5").
func TestContractLayout5(t *testing.T) {
	srv := valkeytest.Start(t)
	addrs := []string{srv.Addr()}
	t.Run("Layout5", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout5, valkey.Layout5)) })
	t.Run("Cluster", func(t *testing.T) {
		c := valkeytest.StartCluster(t, 3)
		storetest.RunHarness(t, harnessLayouts(c.Addrs(), valkey.Layout5, valkey.Layout4))
	})
	t.Run("Writes5Peers4", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout5, valkey.Layout4)) })
	t.Run("Writes4Peers5", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout4, valkey.Layout5)) })
	t.Run("Writes5Peers3", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout5, valkey.Layout3)) })
	t.Run("Writes3Peers5", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout3, valkey.Layout5)) })
}

// TestLayout5FreshKeyIsThreeCommands: with layout 5 a key never seen is
// the claim's SET ... NX GET PXAT and complete5.lua, whose one command is
// SET ... XX GET: 3 commands (INFO commandstats, commands inside the
// script counted), and no PUBLISH while no waiter marked the record. A
// waiter in another process marks it (mark.lua, from Watch), and the
// completion then publishes and wakes it. The layout is docs/protocol.md's,
// "Layout 5 (Valkey)".
func TestLayout5FreshKeyIsThreeCommands(t *testing.T) {
	srv := valkeytest.Start(t)
	prefix := randomPrefix()
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Layout: valkey.Layout5})
	completeOne(t, s, "warm", time.Hour) // loads the scripts
	m := newMeter(t, srv.Addr())
	warmClock(t, s, m)
	id, resp := completeOne(t, s, "k1", time.Hour)
	if d := m.since(); !reflect.DeepEqual(d, map[string]int64{"set": 2, "evalsha": 1}) {
		t.Fatalf("fresh key ran %v, want 2 SET and 1 EVALSHA", d)
	}
	v, err := srv.CLI("GET", s.Key(id))
	if err != nil || !strings.HasPrefix(v, "4c6:tok-k1") {
		t.Fatalf("record = %q, %v; want the completed record (layout 4's) by tok-k1", v, err)
	}
	r, err := s.Get(t.Context(), id)
	if err != nil || r.State != store.Completed || string(r.Response.Body) != string(resp.Body) ||
		!r.RetentionEnd.Equal(r.Response.StoredAt.Add(time.Hour)) {
		t.Fatalf("Get = %+v, %v", r, err)
	}

	// A waiter in another process (a store writing layout 4) marks the
	// record; the completion publishes.
	peer := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Layout: valkey.Layout4})
	id2 := store.Identity{Owner: "alice", Scope: "default", Key: "waited"}
	p := store.ClaimParams{Identity: id2, Fingerprint: "fp", Token: "tok-waited", Lease: 10 * time.Second, Retention: time.Hour}
	if res, err := s.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	ch, stop := peer.Watch(id2)
	defer stop()
	waitFor(t, "the waiter's mark", func() bool {
		v, err := srv.CLI("GET", s.Key(id2))
		return err == nil && strings.HasPrefix(v, "5r") && strings.HasSuffix(v, " 1")
	})
	select {
	case <-ch:
		t.Fatal("the waiter was woken by its own mark")
	default:
	}
	m.since()
	if ok, err := s.Complete(t.Context(), id2, p.Token, resp); err != nil || !ok {
		t.Fatalf("Complete: %v %v", ok, err)
	}
	if d := m.since(); !reflect.DeepEqual(d, map[string]int64{"set": 1, "evalsha": 1, "publish": 1}) {
		t.Fatalf("completion of a waited-on record ran %v, want SET and PUBLISH in one EVALSHA", d)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter in the other process was not woken")
	}
	// A waiter that comes after the completion is woken at once: mark.lua
	// finds the completed record and marks nothing.
	late, stopLate := peer.Watch(id2)
	defer stopLate()
	select {
	case <-late:
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter after the completion was not woken")
	}
	if v, err := srv.CLI("GET", s.Key(id2)); err != nil || !strings.HasPrefix(v, "4c") {
		t.Fatalf("record after a late mark = %q, %v; want the completed record untouched", v, err)
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// takeOver claims p's identity with token "taker" on s until it is a
// takeover (p's short lease has passed by the server's clock).
func takeOver(t *testing.T, s *valkey.Store, p store.ClaimParams) store.ClaimParams {
	t.Helper()
	q := p
	q.Token, q.Lease = "taker", time.Minute
	waitFor(t, "takeover", func() bool {
		res, err := s.Claim(t.Context(), q)
		if err != nil {
			t.Fatalf("takeover Claim: %v", err)
		}
		return res.State == store.Claimed && res.Takeover
	})
	return q
}

// TestLayout5CompletionPutsBack: a completion of layout 5 by a token that
// lost its record (its lease passed and another instance took the key
// over) overwrites it with SET ... XX GET and puts it back in the same
// script, bytes and expiry exactly (its lease passed: the script reads
// the expiry first), and a hash of layout 3 is never written at all (SET
// ... GET refuses it). Within the holder's lease (the key purged and
// claimed again) the script reads nothing first: a running record of
// layout 5 goes back exactly, one of layout 4, one of layout 5 whose
// expiry is not known (0) and a completed record byte for byte with an
// expiry never earlier than before (a longer lease only delays a
// takeover). The holder is answered not held, and the new record's owner
// still completes it.
func TestLayout5CompletionPutsBack(t *testing.T) {
	srv := valkeytest.Start(t)
	prefix := randomPrefix()
	addrs := []string{srv.Addr()}
	s5 := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Layout: valkey.Layout5})
	s4 := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Layout: valkey.Layout4})
	s3 := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Layout: valkey.Layout3})
	resp := store.Response{Status: 201, Body: []byte("late")}
	for _, tc := range []struct {
		name     string
		taker    *valkey.Store
		complete bool // the taker completes before the late holder
		exact    bool // expiry restored to the millisecond
		// noExpiry rewrites the taker's record with expiry 0, as a
		// fresh claim without a bound of the server's clock writes it.
		noExpiry bool
		// purged: the holder's lease has not passed; an operator purged
		// the key and the taker claimed it afresh. The late completion
		// then reads no expiry first (one SET), and puts the record back
		// from what it carries.
		purged bool
	}{
		{"running5", s5, false, true, false, false},
		{"running5NoExpiry", s5, false, true, true, false},
		{"running4", s4, false, true, false, false},
		{"completed4", s4, true, true, false, false},
		{"completed5", s5, true, true, false, false},
		{"hash3", s3, false, true, false, false},
		{"purgedRunning5", s5, false, true, false, true},
		{"purgedRunning5NoExpiry", s5, false, false, true, true},
		{"purgedRunning4", s4, false, false, false, true},
		{"purgedCompleted4", s4, true, false, false, true},
		{"purgedCompleted5", s5, true, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := store.Identity{Owner: "o", Scope: "r", Key: tc.name}
			key := s5.Key(id)
			p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "late", Lease: 20 * time.Millisecond, Retention: time.Hour}
			if tc.purged {
				p.Lease = time.Minute
			}
			if res, err := s5.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
				t.Fatalf("Claim: %+v %v", res, err)
			}
			var q store.ClaimParams
			if tc.purged {
				if ok, err := s5.Delete(t.Context(), id); err != nil || !ok {
					t.Fatalf("Delete: %v %v", ok, err)
				}
				q = p
				q.Token = "taker"
				if res, err := tc.taker.Claim(t.Context(), q); err != nil || res.State != store.Claimed || res.Takeover {
					t.Fatalf("Claim after the purge: %+v %v", res, err)
				}
			} else {
				q = takeOver(t, tc.taker, p)
			}
			if tc.complete {
				if ok, err := tc.taker.Complete(t.Context(), id, q.Token, store.Response{Status: 200, Body: []byte("first")}); err != nil || !ok {
					t.Fatalf("taker's Complete: %v %v", ok, err)
				}
			}
			if tc.noExpiry {
				v, _ := srv.CLI("GET", key)
				i := strings.LastIndexByte(v[:len(v)-2], ' ')
				if _, err := srv.CLI("SET", key, v[:i]+" 0"+v[len(v)-2:], "KEEPTTL"); err != nil {
					t.Fatal(err)
				}
			}
			before := dump(t, srv, key)
			e0, _ := srv.CLI("PEXPIRETIME", key)
			t0 := time.Now()
			ok, err := s5.Complete(t.Context(), id, p.Token, resp)
			elapsed := time.Since(t0)
			if err != nil || ok {
				t.Fatalf("late holder's Complete = %v, %v; want not held", ok, err)
			}
			if after := dump(t, srv, key); after != before {
				t.Fatalf("record after the late completion:\n%q\nwant it put back as it was:\n%q", after, before)
			}
			e1, _ := srv.CLI("PEXPIRETIME", key)
			n0, _ := strconv.ParseInt(e0, 10, 64)
			n1, _ := strconv.ParseInt(e1, 10, 64)
			switch {
			case tc.exact && n1 != n0:
				t.Fatalf("PEXPIRETIME %d after the put-back, want %d exactly", n1, n0)
			case n1 < n0 || n1 > n0+time.Hour.Milliseconds()+elapsed.Milliseconds()+1000:
				t.Fatalf("PEXPIRETIME %d after the put-back, want no earlier than %d", n1, n0)
			}
			if !tc.complete {
				if ok, err := tc.taker.Complete(t.Context(), id, q.Token, resp); err != nil || !ok {
					t.Fatalf("taker's Complete after the put-back: %v %v", ok, err)
				}
			}
			if r, err := s5.Get(t.Context(), id); err != nil || r == nil || r.State != store.Completed {
				t.Fatalf("Get after: %+v %v", r, err)
			}
		})
	}
}

// dump is the record at key as TYPE and its value (GET, or HGETALL of a
// hash).
func dump(t *testing.T, srv *valkeytest.Server, key string) string {
	t.Helper()
	typ, err := srv.CLI("TYPE", key)
	if err != nil {
		t.Fatalf("TYPE: %v", err)
	}
	var v string
	if typ == "hash" {
		v, err = srv.CLI("HGETALL", key)
	} else {
		v, err = srv.CLI("GET", key)
	}
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return typ + " " + v
}

// TestLayout5ExtendMovesItsExpiry: a running record of layout 5 carries
// its key's expiry (0 from a fresh claim without a bound of the server's
// clock), which a repeated claim and Extend write with the key's (the
// put-back restores it from there), and keeps its waiters' mark.
func TestLayout5ExtendMovesItsExpiry(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5})
	id := store.Identity{Owner: "o", Scope: "r", Key: "extend"}
	key := s.Key(id)
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: 10 * time.Second}
	check := func(what string, mark string) {
		t.Helper()
		v, err := srv.CLI("GET", key)
		e, eerr := srv.CLI("PEXPIRETIME", key)
		fresh := what == "claimed" && strings.HasSuffix(v, " 0 "+mark) // no bound of the server's clock yet
		if err != nil || eerr != nil || !strings.HasPrefix(v, "5r") || (!strings.HasSuffix(v, " "+e+" "+mark) && !fresh) {
			t.Fatalf("%s: record %q, PEXPIRETIME %s (%v %v); want it to end with its expiry and mark %s", what, v, e, err, eerr, mark)
		}
	}
	if res, err := s.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	check("claimed", "0")
	ch, stop := s.Watch(id)
	defer stop()
	waitFor(t, "mark", func() bool { v, _ := srv.CLI("GET", key); return strings.HasSuffix(v, " 1") })
	e0, _ := srv.CLI("PEXPIRETIME", key)
	if ok, err := s.Extend(t.Context(), id, p.Token, time.Minute); err != nil || !ok {
		t.Fatalf("Extend: %v %v", ok, err)
	}
	check("extended", "1")
	if e1, _ := srv.CLI("PEXPIRETIME", key); e1 == e0 {
		t.Fatalf("Extend by a minute left the expiry at %s", e1)
	}
	if res, err := s.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
		t.Fatalf("repeated Claim: %+v %v", res, err)
	}
	check("claimed again", "1")
	if r, err := s.Get(t.Context(), id); err != nil || r.State != store.Running || r.Token != "t" {
		t.Fatalf("Get: %+v %v", r, err)
	}
	select {
	case <-ch:
		t.Fatal("the waiter was woken by Extend or a repeated claim")
	default:
	}
	if ok, err := s.Release(t.Context(), id, p.Token); err != nil || !ok {
		t.Fatalf("Release: %v %v", ok, err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not wake the waiter")
	}
}

// TestContractLayout5Cached: the contract holds with the replay cache on,
// on a store writing layout 5 beside peers writing 4 (client tracking
// invalidates a cached key on every write, the completion's put-back and
// the waiters' mark included).
func TestContractLayout5Cached(t *testing.T) { testContractCached(t, valkey.Layout5, valkey.Layout4) }

// TestCacheLayout5: a completion of layout 5 (layout 4's completed record)
// is replayed from the cache with no command once read, and a purge
// through a peer reaches the cache.
func TestCacheLayout5(t *testing.T) { testCacheString(t, valkey.Layout5) }

// TestAcksLayout5: with acks on, claims and completions of layout 5 wait
// for the replica on the write's own connection (claim.lua then WAIT,
// complete5.lua, which reads first with acks on, then WAIT); an
// unacknowledged completion is re-confirmed by its token's repeat.
func TestAcksLayout5(t *testing.T) { testAcksString(t, valkey.Layout5) }

// TestLayout5SentinelFailoverDropsClockBound: after a Sentinel failover
// the first fresh claim of layout 5 on the new primary does not set its
// expiry (nor the one its record carries) from the old primary's clock.
func TestLayout5SentinelFailoverDropsClockBound(t *testing.T) {
	testSentinelFailoverDropsClockBound(t, valkey.Layout5)
}

// TestFullValkeyLayout5: on a full Valkey (noeviction) a store writing
// layout 5 still replays a completed record and answers a running one
// from a read (its SET ... NX GET is refused with -OOM like any write),
// waiters still mark (mark.lua declares allow-oom) and are not woken by
// it, a fresh key and a completion stay the -OOM error (fail closed), and
// nothing is written: the running record keeps its bytes.
func TestFullValkeyLayout5(t *testing.T) {
	srv := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5})
	done, resp := completeOne(t, s, "done", time.Hour)
	want, err := s.Claim(t.Context(), store.ClaimParams{Identity: done, Fingerprint: "fp-done", Recipe: "v=hs1", Token: "replay", Lease: time.Second, Retention: time.Hour})
	if err != nil || want.State != store.Completed || string(want.Response.Body) != string(resp.Body) {
		t.Fatalf("replay before the server is full = %+v, %v", want, err)
	}
	running := store.Identity{Owner: "alice", Scope: "default", Key: "running"}
	p := store.ClaimParams{Identity: running, Fingerprint: "fp", Token: "holder", Lease: time.Minute, Retention: time.Hour}
	if res, err := s.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	free := srv.Fill(t)
	defer free()

	ch, stop := s.Watch(running)
	defer stop()
	waitFor(t, "the mark on a full server", func() bool { v, _ := srv.CLI("GET", s.Key(running)); return strings.HasSuffix(v, " 1") })
	select {
	case <-ch:
		t.Fatal("the waiter was woken by its own mark")
	default:
	}
	before := dump(t, srv, s.Key(running))
	if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: done, Fingerprint: "fp-done", Recipe: "v=hs1", Token: "full", Lease: time.Second, Retention: time.Hour}); err != nil || !reflect.DeepEqual(res, want) {
		t.Fatalf("replay on a full server = %+v, %v; want %+v", res, err, want)
	}
	q := p
	q.Token = "dup"
	if res, err := s.Claim(t.Context(), q); err != nil || res.State != store.Running {
		t.Fatalf("duplicate on a full server = %+v, %v; want Running", res, err)
	}
	fresh := store.Identity{Owner: "alice", Scope: "default", Key: "fresh"}
	if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: fresh, Fingerprint: "fp", Token: "t", Lease: time.Minute}); err == nil {
		t.Fatalf("fresh claim on a full server = %+v, want the -OOM error", res)
	}
	if ok, err := s.Complete(t.Context(), running, p.Token, resp); err == nil {
		t.Fatalf("Complete on a full server = %v, want the -OOM error", ok)
	}
	if after := dump(t, srv, s.Key(running)); after != before {
		t.Fatalf("running record on a full server changed:\n%q\nwant\n%q", after, before)
	}
	if n, _ := srv.CLI("EXISTS", s.Key(fresh)); n != "0" {
		t.Fatalf("a fresh claim on a full server wrote its key")
	}
}

// TestLayout5LateCompletionKeepsTheIndexedCompletion: a holder whose
// lease passed completes late, after the key was taken over, completed
// by the new holder and indexed at its resource (a route with
// resource_from). Its completion must leave that record as it was: its
// completion time (stored at, what the index entry names) and its
// retention end unchanged, so that a DELETE of the resource still
// tombstones it (store contract rules 9 and 11) and a retry of the create
// then answers Gone instead of replaying the deleted resource. Run for a
// new holder writing layout 5 and one writing layout 4 (a rollout).
func TestLayout5LateCompletionKeepsTheIndexedCompletion(t *testing.T) {
	srv := valkeytest.Start(t)
	prefix := randomPrefix()
	addrs := []string{srv.Addr()}
	s5 := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Layout: valkey.Layout5})
	s4 := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Layout: valkey.Layout4})
	c := raw(t, srv.Addr())
	for _, taker := range []struct {
		name string
		s    *valkey.Store
	}{{"taker5", s5}, {"taker4", s4}} {
		t.Run(taker.name, func(t *testing.T) {
			id := store.Identity{Owner: "o", Scope: "r", Key: "late-" + taker.name}
			path := "/v1/orders/" + taker.name
			p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "late", Lease: 20 * time.Millisecond, Retention: time.Hour}
			if res, err := s5.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
				t.Fatalf("Claim: %+v %v", res, err)
			}
			q := takeOver(t, taker.s, p)
			if ok, err := taker.s.Complete(t.Context(), id, q.Token, store.Response{Status: 201, Body: []byte("created")}); err != nil || !ok {
				t.Fatalf("taker's Complete: %v %v", ok, err)
			}
			if err := taker.s.Index(t.Context(), path, id); err != nil {
				t.Fatalf("Index: %v", err)
			}
			before, err := s5.Get(t.Context(), id)
			if err != nil || before == nil || before.State != store.Completed {
				t.Fatalf("Get: %+v %v", before, err)
			}
			// The late completion comes some milliseconds after the
			// taker's, by the server's clock.
			waitFor(t, "the server's clock to pass the completion", func() bool {
				return serverTime(t, c).After(before.Response.StoredAt.Add(20 * time.Millisecond))
			})
			if ok, err := s5.Complete(t.Context(), id, p.Token, store.Response{Status: 500, Body: []byte("late")}); err != nil || ok {
				t.Fatalf("late holder's Complete = %v, %v; want not held", ok, err)
			}
			after, err := s5.Get(t.Context(), id)
			if err != nil || after == nil {
				t.Fatalf("Get after: %+v %v", after, err)
			}
			if !after.Response.StoredAt.Equal(before.Response.StoredAt) || !after.RetentionEnd.Equal(before.RetentionEnd) {
				t.Errorf("late completion moved the completed record: stored at %v -> %v, retention end %v -> %v",
					before.Response.StoredAt, after.Response.StoredAt, before.RetentionEnd, after.RetentionEnd)
			}
			n, err := s5.Tombstone(t.Context(), store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path})
			if err != nil || n != 1 {
				t.Fatalf("Tombstone after the late completion = %d, %v; want 1 (the indexed completion)", n, err)
			}
			if res, err := s5.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "retry", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Gone {
				t.Fatalf("retry of the create after the DELETE = %+v, %v; want Gone", res.State, err)
			}
		})
	}
}

// TestLayout5RetriedCompletionKeepsTheRecord: a completion whose reply
// did not come back (the server stalled past the caller's deadline) went
// through once the server resumed; the holder's retry, still within the
// claim's lease, finds the record its own token completed. It must leave
// it as it was: the response, and the expiry its completion time is read
// from (docs/protocol.md, "Layout 5 (Valkey)").
func TestLayout5RetriedCompletionKeepsTheRecord(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5})
	c := raw(t, srv.Addr())
	completeOne(t, s, "warm", time.Hour) // loads the scripts: no NOSCRIPT fallback after the pause
	id := store.Identity{Owner: "o", Scope: "r", Key: "retried"}
	key := s.Key(id)
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "tok", Lease: time.Minute, Retention: time.Hour}
	if res, err := s.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	resp := store.Response{Status: 201, Body: []byte("created")}
	srv.Pause()
	t.Cleanup(srv.Resume)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	ok, err := s.Complete(ctx, id, p.Token, resp)
	cancel()
	if err == nil {
		t.Fatalf("Complete on a paused server = %v, want an error", ok)
	}
	srv.Resume()
	waitFor(t, "the stalled completion to run", func() bool {
		v, _ := srv.CLI("GET", key)
		return strings.HasPrefix(v, "4c")
	})
	before := dump(t, srv, key)
	e0, _ := srv.CLI("PEXPIRETIME", key)
	r0, err := s.Get(t.Context(), id)
	if err != nil || r0 == nil || r0.State != store.Completed {
		t.Fatalf("Get: %+v %v", r0, err)
	}
	waitFor(t, "the server's clock to pass the completion", func() bool {
		return serverTime(t, c).After(r0.Response.StoredAt.Add(20 * time.Millisecond))
	})
	if _, err := s.Complete(t.Context(), id, p.Token, resp); err != nil {
		t.Fatalf("retried Complete: %v", err)
	}
	e1, _ := srv.CLI("PEXPIRETIME", key)
	if after := dump(t, srv, key); after != before || e1 != e0 {
		t.Fatalf("record after the retried completion: PEXPIRETIME %s (was %s), bytes kept %v; want both as they were", e1, e0, after == before)
	}
}

// TestMarkNeverReadsTheWholeRecord: a waiter whose record completed before
// its mark ran (the herd's usual race) is woken at once, and mark.lua reads
// only the record's first bytes, never the whole value: a completed record
// may hold a response of many MiB, which a GET would copy into the
// script's memory once per waiting instance.
func TestMarkNeverReadsTheWholeRecord(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5})
	woken := func(id store.Identity) {
		t.Helper()
		ch, stop := s.Watch(id)
		defer stop()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter on a completed record was not woken at once")
		}
	}
	warm, _ := completeOne(t, s, "warm", time.Hour)
	woken(warm) // loads mark.lua (a first EVALSHA is answered NOSCRIPT, then EVAL)
	id, _ := completeOne(t, s, "done", time.Hour)
	m := newMeter(t, srv.Addr())
	woken(id)
	if d := m.since(); !reflect.DeepEqual(d, map[string]int64{"evalsha": 1, "getrange": 1}) {
		t.Fatalf("the mark of a completed record ran %v, want one EVALSHA reading 2 bytes (GETRANGE), no GET", d)
	}
}
