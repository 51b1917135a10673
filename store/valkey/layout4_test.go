package valkey_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testcerts"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestLayout4FreshKeyIsOneSet: with layout 4 a key never seen is claimed
// by one plain SET NX, whose PXAT comes from the store's bound of the
// server's clock (so no PEXPIRETIME follows it), and completed by
// complete4.lua, whose record is a string; a replay is answered from the
// SET's GET and its key's PEXPIRETIME. The layout is docs/protocol.md's,
// "Layout 4 (Valkey)".
func TestLayout4FreshKeyIsOneSet(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout4})
	completeOne(t, s, "warm", time.Hour) // loads the scripts
	m := newMeter(t, srv.Addr())
	warmClock(t, s, m)
	id, resp := completeOne(t, s, "k1", time.Hour)
	d := m.since()
	want := map[string]int64{"set": 2, "evalsha": 1, "get": 1, "publish": 1}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("fresh key ran %v, want %v", d, want)
	}
	if typ, err := srv.CLI("TYPE", s.Key(id)); err != nil || typ != "string" {
		t.Fatalf("TYPE of the record = %q, %v; want string", typ, err)
	}
	v, err := srv.CLI("GET", s.Key(id))
	if err != nil || !strings.HasPrefix(v, "4c6:tok-k1") {
		t.Fatalf("record = %q, %v; want a completed record of layout 4 by tok-k1", v, err)
	}
	r, err := s.Get(t.Context(), id)
	if err != nil || r.State != store.Completed || string(r.Response.Body) != string(resp.Body) ||
		!r.RetentionEnd.Equal(r.Response.StoredAt.Add(time.Hour)) || r.CreatedAt.After(r.Response.StoredAt) {
		t.Fatalf("Get = %+v, %v", r, err)
	}
	m.since()
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp-k1", Recipe: "v=hs1", Token: "again", Lease: time.Second, Retention: time.Hour})
	if err != nil || res.State != store.Completed || !reflect.DeepEqual(res.Response, r.Response) {
		t.Fatalf("replay Claim = %+v, %v; want the record Get read", res, err)
	}
	if d := m.since(); !reflect.DeepEqual(d, map[string]int64{"set": 1, "pexpiretime": 1}) {
		t.Fatalf("replay ran %v, want one SET NX GET and its PEXPIRETIME", d)
	}
}

// warmClock claims fresh keys until one is a SET alone (the store holds a
// bound of the server's clock: the claim before it asked PEXPIRETIME with
// a round trip under 2 ms), then releases them; m starts after them. The
// first 32 claims spread over valkey-go's connections, which it dials on
// first use: each dial drops the bound.
func warmClock(t *testing.T, s *valkey.Store, m *commandMeter) {
	t.Helper()
	for i := range 1032 {
		id := store.Identity{Owner: "alice", Scope: "default", Key: "clock-" + strconv.Itoa(i)}
		m.since()
		res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "tok-" + id.Key, Lease: time.Second, Retention: time.Hour})
		d := m.since()
		if err != nil || res.State != store.Claimed {
			t.Fatalf("Claim: %+v, %v", res, err)
		}
		if _, err := s.Release(t.Context(), id, "tok-"+id.Key); err != nil {
			t.Fatalf("Release: %v", err)
		}
		m.since()
		if i >= 32 && reflect.DeepEqual(d, map[string]int64{"set": 1}) {
			return
		}
	}
	t.Fatal("no fresh claim in 1000 after the first 32 was a SET alone: the store never bounded the server's clock")
}

// TestLayout4ExpiryFromClockBound: a fresh claim that sets its key's
// expiry from the store's bound of the server's clock gives it a lease
// and a retention no shorter than PX from the moment the claim was sent
// (TIME before the call), and longer by at most the bound's error; Claim
// and Get agree on the lease end to the millisecond. After a reconnection
// (a restart here, a failover in production: another server, maybe
// another clock) the bound is dropped and the next fresh claim asks
// PEXPIRETIME again.
func TestLayout4ExpiryFromClockBound(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout4})
	m := newMeter(t, srv.Addr())
	warmClock(t, s, m)
	const lease, retention = 30 * time.Second, time.Hour
	id := store.Identity{Owner: "alice", Scope: "default", Key: "bounded"}
	before := serverTime(t, c)
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: lease, Retention: retention})
	after := serverTime(t, c)
	if d := m.since(); err != nil || res.State != store.Claimed || d["pexpiretime"] != 0 {
		t.Fatalf("Claim = %+v, %v, ran %v; want Claimed by a SET alone", res, err, d)
	}
	exp, err := c.Do(t.Context(), c.B().Pexpiretime().Key(s.Key(id)).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	// Retention 1 h > lease: the key's expiry is the retention's.
	sentAt := before.UnixMilli() + retention.Milliseconds()
	maxErr := (2*time.Millisecond + 2*time.Millisecond + 3*time.Millisecond).Milliseconds()
	if exp < sentAt || exp > after.UnixMilli()+retention.Milliseconds()+maxErr {
		t.Fatalf("PEXPIRETIME %d, want in [TIME before + retention = %d, TIME after + retention + %d ms = %d]",
			exp, sentAt, maxErr, after.UnixMilli()+retention.Milliseconds()+maxErr)
	}
	if want := time.UnixMilli(exp - retention.Milliseconds() + lease.Milliseconds()); !res.LeaseEnd.Equal(want) {
		t.Fatalf("LeaseEnd %v, want PEXPIRETIME - retention + lease = %v", res.LeaseEnd, want)
	}
	if r, err := s.Get(t.Context(), id); err != nil || r == nil || !r.LeaseEnd.Equal(res.LeaseEnd) || r.LeaseEnd.Before(before.Add(lease)) {
		t.Fatalf("Get = %+v, %v; want lease end %v (Claim's), not before TIME before + lease", r, err, res.LeaseEnd)
	}

	srv.Restart()
	pingEventually(t, s, 10*time.Second)
	m = newMeter(t, srv.Addr())
	other := store.Identity{Owner: "alice", Scope: "default", Key: "after-restart"}
	if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: other, Fingerprint: "fp", Token: "t", Lease: lease, Retention: retention}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim after the restart = %+v, %v", res, err)
	}
	if d := m.since(); d["pexpiretime"] != 1 {
		t.Fatalf("first fresh claim after the reconnection ran %v, want it to ask PEXPIRETIME (no bound across a new connection)", d)
	}
}

// TestContractLayout4Cached: the replay cache reads records of layout 4
// (GET and PEXPIRETIME, tracked) and the contract holds with it on, in a
// fleet writing both layouts.
func TestContractLayout4Cached(t *testing.T) { testContractCached(t, valkey.Layout4, valkey.Layout3) }

// testContractCached runs the contract with the replay cache on, the
// store writing layout and its peers peerLayout.
func testContractCached(t *testing.T, layout, peerLayout int) {
	srv := valkeytest.Start(t)
	addrs := []string{srv.Addr()}
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, _ *storetest.Clock) store.Store {
			return newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: randomPrefix(), CacheBytes: 1 << 20, Layout: layout})
		},
		NewPeer: func(t *testing.T, s store.Store, _ *storetest.Clock) store.Store {
			return newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: s.(*valkey.Store).KeyPrefix(), CacheBytes: 1 << 20, Layout: peerLayout})
		},
	})
}

// TestCacheLayout4: a completed record of layout 4 is replayed from the
// cache with no command once read, equal to what Get and Claim answer, and
// a purge through a peer reaches the cache.
func TestCacheLayout4(t *testing.T) { testCacheString(t, valkey.Layout4) }

// testCacheString is TestCacheLayout4 on a store writing layout (4 or 5:
// the completed record is the same string).
func testCacheString(t *testing.T, layout int) {
	srv := valkeytest.Start(t)
	prefix := randomPrefix()
	opts := valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, CacheBytes: 1 << 20, Layout: layout}
	s := newStore(t, opts)
	id, _ := completeOne(t, s, "k1", time.Hour)
	m := newMeter(t, srv.Addr())
	first, res := cached(t, s, id)
	if first == nil || res != store.CacheMiss {
		t.Fatalf("first cached read: %+v %v, want the record from the server (miss)", first, res)
	}
	// Two MULTI .. EXEC (valkey-go wraps each tracked read), pipelined in
	// one DoMultiCache.
	if d := m.since(); d["exec"] != 2 || d["get"] != 1 || d["pexpiretime"] != 1 || d["evalsha"]+d["evalsha_ro"] != 0 {
		t.Fatalf("first cached read sent %v, want a GET and a PEXPIRETIME, each in its MULTI .. EXEC", d)
	}
	for range 3 {
		if rec, res := cached(t, s, id); res != store.CacheHit || !reflect.DeepEqual(rec, first) {
			t.Fatalf("cached read: %+v %v, want a hit equal to %+v", rec, res, first)
		}
	}
	if d := m.since(); len(d) != 0 {
		t.Fatalf("cache hits sent %v, want no command", d)
	}
	if got, err := s.Get(t.Context(), id); err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("Get = %+v, %v; cached %+v", got, err, first)
	}
	purgeReachesPeer(t, s, newStore(t, opts), 3)
}

// TestAcksLayout4: with acks on, claims and completions of layout 4 wait
// for the replica on the write's own connection (claim.lua then WAIT,
// complete4.lua then WAIT); an unacknowledged completion is re-confirmed
// by its token's repeat once the replica is back.
func TestAcksLayout4(t *testing.T) { testAcksString(t, valkey.Layout4) }

// testAcksString is TestAcksLayout4 on a store writing layout (4 or 5).
func testAcksString(t *testing.T, layout int) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	var acks ackLog
	s := newStore(t, valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 1, Timeout: ackTimeout}, OnAck: acks.on, Layout: layout})
	ctx := t.Context()
	done := store.Identity{Owner: "o", Scope: "r", Key: "acked"}
	untilAcked(t, "Claim with a live replica", claimed(s, claimParams(done, "t1")))
	pingEventually(t, s, 10*time.Second)

	replica.Pause()
	_, err := s.Claim(ctx, claimParams(store.Identity{Owner: "o", Scope: "r", Key: "not-acked"}, "t2"))
	wantNotAcknowledged(t, "Claim with the replica frozen", err)
	_, err = s.Complete(ctx, done, "t1", store.Response{Status: 201, Body: []byte("made")})
	wantNotAcknowledged(t, "Complete with the replica frozen", err)
	replica.Resume()
	untilAcked(t, "repeated Complete by the completing token", func() error {
		ok, err := s.Complete(ctx, done, "t1", store.Response{Status: 500, Body: []byte("other")})
		if err == nil && !ok {
			err = errors.New("answered false, want true")
		}
		return err
	})
	rec, err := s.Get(ctx, done)
	if err != nil || rec == nil || rec.Response == nil || string(rec.Response.Body) != "made" {
		t.Fatalf("record after the repeat = %+v, %v; want the first response kept", rec, err)
	}
	if out, err := replica.CLI("GET", s.Key(done)); err != nil || !strings.HasPrefix(out, "4c2:t1") {
		t.Fatalf("record on the replica = %q, %v; want completed in layout 4", out, err)
	}
}

// TestLayout4SentinelFailoverDropsClockBound: a Sentinel failover moves
// the store to another server, whose clock the bound taken on the old
// primary says nothing about; the first fresh claim the new primary runs
// does not set its expiry from that bound (it asks PEXPIRETIME, or
// repeats its claim with claim.lua when the switch came during its call),
// and its lease is no shorter than px from the new primary's time before
// the claim was sent.
func TestLayout4SentinelFailoverDropsClockBound(t *testing.T) {
	testSentinelFailoverDropsClockBound(t, valkey.Layout4)
}

// testSentinelFailoverDropsClockBound is
// TestLayout4SentinelFailoverDropsClockBound on a store writing layout (4
// or 5).
func testSentinelFailoverDropsClockBound(t *testing.T, layout int) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	sen := valkeytest.StartSentinel(t, primary, "idemgate-clock")
	s := newStore(t, valkey.Options{Addrs: []string{sen.Addr()}, SentinelMaster: sen.MasterName, KeyPrefix: randomPrefix(), Layout: layout})
	warmClock(t, s, newMeter(t, primary.Addr()))
	// The sentinel learns the replica from the primary's INFO (FAILOVER
	// answers NOGOODSLAVE until it has) and may abort a failover it
	// started: ask again every 2 s until the replica is the primary. The
	// claims are counted from the promotion on (a replica counts the
	// commands it replicates too).
	deadline, asked := time.Now().Add(60*time.Second), time.Time{}
	for ; ; time.Sleep(20 * time.Millisecond) {
		if out, err := replica.CLI("INFO", "replication"); err == nil && strings.Contains(out, "role:master") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica was not promoted in 60 s")
		}
		if time.Since(asked) > 2*time.Second {
			out, err := sen.CLI("SENTINEL", "FAILOVER", sen.MasterName)
			t.Logf("SENTINEL FAILOVER: %q %v", out, err)
			asked = time.Now()
		}
	}
	const lease = 30 * time.Second
	c := raw(t, replica.Addr())
	m := newMeter(t, replica.Addr())
	deadline = time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no claim reached the promoted replica in 30 s")
		}
		id := store.Identity{Owner: "alice", Scope: "default", Key: "failover-" + strconv.Itoa(i)}
		before := serverTime(t, c)
		res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: lease, Retention: time.Hour})
		d := m.since()
		delete(d, "time")      // serverTime's own
		delete(d, "role")      // valkey-go's check of a new connection's role
		delete(d, "subscribe") // the events subscription, reconnected
		if d["set"] == 0 {
			continue // still the old primary (or refused there: READONLY)
		}
		if err != nil || res.State != store.Claimed {
			t.Fatalf("first Claim on the new primary = %+v, %v", res, err)
		}
		t.Logf("first claim on the new primary (claim %d) ran %v", i, d)
		if reflect.DeepEqual(d, map[string]int64{"set": 1}) {
			t.Fatalf("first claim on the new primary ran %v: its expiry came from the old primary's clock", d)
		}
		exp, err := c.Do(t.Context(), c.B().Pexpiretime().Key(s.Key(id)).Build()).AsInt64()
		if err != nil || exp < before.UnixMilli()+time.Hour.Milliseconds() {
			t.Fatalf("PEXPIRETIME %d (%v), want >= TIME before + retention = %d", exp, err, before.UnixMilli()+time.Hour.Milliseconds())
		}
		return
	}
}

// TestLayout4OverTLS: layout 4 dials its connections itself (to note
// them for the clock bound), as valkey-go does, TLS included: claims,
// completions and replays work over a TLS-only port, and fresh claims set
// their expiry from the bound there too.
func TestLayout4OverTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "valkey-ca")
	leaf := ca.Issue(t, testcerts.Options{Server: true, CommonName: "valkey"})
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": ca.PEM, "cert.pem": leaf.CertPEM, "key.pem": leaf.KeyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tlsPort := valkeytest.FreePort(t)
	srv := valkeytest.Start(t, valkeytest.WithArgs("--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"), "--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "no"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	s := newStore(t, valkey.Options{Addrs: []string{"127.0.0.1:" + strconv.Itoa(tlsPort)}, TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		KeyPrefix: randomPrefix(), Layout: valkey.Layout4})
	completeOne(t, s, "warm", time.Hour) // loads the scripts
	m := newMeter(t, srv.Addr())
	warmClock(t, s, m)
	id, resp := completeOne(t, s, "tls", time.Hour)
	if d := m.since(); !reflect.DeepEqual(d, map[string]int64{"set": 2, "evalsha": 1, "get": 1, "publish": 1}) {
		t.Fatalf("fresh key over TLS ran %v", d)
	}
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp-tls", Recipe: "v=hs1", Token: "again", Lease: time.Second, Retention: time.Hour})
	if err != nil || res.State != store.Completed || string(res.Response.Body) != string(resp.Body) {
		t.Fatalf("replay over TLS = %+v, %v", res, err)
	}
}

// TestClaimNeverAnswersAnotherIdentitysRecord: a completed record of
// layout 4 found under the key of another identity (by hand here: only a
// SHA-256 collision or a key written by an operator puts it there) is
// never handed to the claimant as its replay, whether the SET NX GET of
// layout 4 or claim.lua (a layout 3 writer in the same fleet) reads it:
// the claim fails closed, as Get, the replay cache and a full server's
// Claim do.
func TestClaimNeverAnswersAnotherIdentitysRecord(t *testing.T) {
	srv := valkeytest.Start(t)
	prefix := randomPrefix()
	s4 := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Layout: valkey.Layout4})
	s3 := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Layout: valkey.Layout3})
	alice, _ := completeOne(t, s4, "k1", time.Hour)
	if v, err := srv.CLI("GETRANGE", s4.Key(alice), "0", "1"); err != nil || v != "4c" {
		t.Fatalf("alice's record starts %q, %v; want a completed record of layout 4", v, err)
	}
	for name, s := range map[string]*valkey.Store{"layout 4 (SET NX GET)": s4, "layout 3 (claim.lua)": s3} {
		mallory := store.Identity{Owner: "mallory-" + strings.Fields(name)[1], Scope: "default", Key: "k1"}
		if n, err := srv.CLI("COPY", s4.Key(alice), s.Key(mallory)); err != nil || n != "1" {
			t.Fatalf("COPY = %q, %v", n, err)
		}
		res, err := s.Claim(t.Context(), store.ClaimParams{Identity: mallory, Fingerprint: "fp-k1", Recipe: "v=hs1",
			Token: "mallory", Lease: time.Second, Retention: time.Hour})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: Claim by mallory of a key holding alice's record = %+v (body %q), %v; want ErrUnavailable",
				name, res.State, res.Response.Body, err)
		}
	}
}

// TestLayout4HeldClaimKeepsAWholeLease: a fresh claim whose SET the
// server runs late (its writes paused, as a primary pauses them during a
// FAILOVER, or a busy server, or an idemgate process stopped between
// reading its bound of the server's clock and sending the SET) still
// holds the record for a whole lease from the moment the server ran it
// (store contract, rule 1: lease end now+Lease): another instance's retry
// of the same request, which may take over an abandoned record, finds it
// running, and the operation does not run twice.
func TestLayout4HeldClaimKeepsAWholeLease(t *testing.T) {
	testHeldClaimKeepsAWholeLease(t, valkey.Layout4)
}

// TestLayout5HeldClaimKeepsAWholeLease: TestLayout4HeldClaimKeepsAWholeLease
// for a store writing layout 5.
func TestLayout5HeldClaimKeepsAWholeLease(t *testing.T) {
	testHeldClaimKeepsAWholeLease(t, valkey.Layout5)
}

func testHeldClaimKeepsAWholeLease(t *testing.T, layout int) {
	// With a retention shorter than the lease, the key's expiry is the
	// lease end: a SET run after it (PXAT in the past) deletes the key it
	// claimed, which a retry then claims afresh.
	for _, retention := range []time.Duration{time.Hour, 100 * time.Millisecond} {
		t.Run("retention="+retention.String(), func(t *testing.T) {
			srv := valkeytest.Start(t)
			prefix := randomPrefix()
			s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Layout: layout})
			peer := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Layout: layout})
			c := raw(t, srv.Addr())
			warmClock(t, s, newMeter(t, srv.Addr()))
			const lease, pause = 300 * time.Millisecond, 900
			if err := c.Do(t.Context(), c.B().ClientPause().Timeout(pause).Write().Build()).Error(); err != nil {
				t.Fatalf("CLIENT PAUSE: %v", err)
			}
			id := store.Identity{Owner: "alice", Scope: "default", Key: "paused"}
			p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "holder", Lease: lease, Retention: retention}
			res, err := s.Claim(t.Context(), p)
			ran := serverTime(t, c)
			if err != nil || res.State != store.Claimed {
				t.Fatalf("Claim = %+v, %v; want Claimed", res, err)
			}
			// ran is after the server ran the claim, by less than a lease:
			// a whole lease from then has not ended yet.
			if !res.LeaseEnd.After(ran) {
				t.Errorf("lease end %v answered with the server's time %v already past it", res.LeaseEnd, ran)
			}
			q := p
			q.Token = "retry"
			got, err := peer.Claim(t.Context(), q)
			if err != nil || got.State != store.Running {
				t.Fatalf("another instance's Claim right after the holder's = %+v, %v; want Running (the holder's lease, %v from %v, ended at %v)",
					got, err, lease, ran, res.LeaseEnd)
			}
		})
	}
}

// TestLayout5ClaimSlowedWithinATenthOfItsLeaseKeepsItsSet: a fresh claim
// whose answer takes longer than a sample may (the server paused its
// writes for 100 ms) but less than a tenth of its 10 s lease keeps the
// expiry it set: one SET, no claim.lua. On a saturated machine most
// answers take over a few milliseconds, and a repeat of each would cost
// a round trip and a script per fresh key.
func TestLayout5ClaimSlowedWithinATenthOfItsLeaseKeepsItsSet(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5})
	m := newMeter(t, srv.Addr())
	warmClock(t, s, m)
	c := raw(t, srv.Addr())
	if err := c.Do(t.Context(), c.B().ClientPause().Timeout(100).Write().Build()).Error(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	m.since()
	id := store.Identity{Owner: "alice", Scope: "default", Key: "slowed"}
	sent := time.Now()
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "holder", Lease: 10 * time.Second, Retention: time.Hour})
	took := time.Since(sent)
	if err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v; want Claimed", res, err)
	}
	if took < 50*time.Millisecond || took > time.Second {
		t.Fatalf("the claim took %v; the test needs 50 ms to 1 s (the pause held it, a tenth of the lease did not pass)", took)
	}
	if d := m.since(); !reflect.DeepEqual(d, map[string]int64{"set": 1}) {
		t.Errorf("a claim answered in %v, within a tenth of its lease, sent %v; want one SET", took, d)
	}
}
