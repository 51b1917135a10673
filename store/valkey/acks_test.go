package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// ackLog records OnAck calls.
type ackLog struct {
	mu    sync.Mutex
	calls []string // "op:true" / "op:false"
}

func (l *ackLog) on(op string, _ time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		l.calls = append(l.calls, op+":true")
	} else {
		l.calls = append(l.calls, op+":false")
	}
}

func (l *ackLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, " ")
}

// collapsed is String without the retries untilAcked made: an "op:false"
// directly followed by the same op again.
func (l *ackLog) collapsed() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, c := range l.calls {
		op, _, _ := strings.Cut(c, ":")
		if strings.HasSuffix(c, ":false") && i+1 < len(l.calls) && strings.HasPrefix(l.calls[i+1], op+":") {
			continue
		}
		out = append(out, c)
	}
	return strings.Join(out, " ")
}

// untilAcked runs write, a claim or completion that a live replica must
// acknowledge, again while it fails with ErrNotAcknowledged, for up to 10 s,
// and fails the test on any other error or at the end. A live replica
// acknowledges well within ackTimeout, but on a machine loaded by other
// test packages it misses it now and then; the same token may write again
// (a repeat re-confirms, store contract rule 3), so a miss is retried rather
// than taken for a broken acknowledgement.
func untilAcked(t *testing.T, what string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := write()
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotAcknowledged) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// claimed returns a write for untilAcked: Claim that must answer Claimed.
func claimed(s *valkey.Store, p store.ClaimParams) func() error {
	return func() error {
		res, err := s.Claim(context.Background(), p)
		if err == nil && res.State != store.Claimed {
			err = fmt.Errorf("claim answered %+v, want claimed", res)
		}
		return err
	}
}

// ackTimeout is short, for the tests that wait for it to pass with a
// replica frozen; liveAckTimeout is for a test whose replicas stay live and
// whose writes must all be acknowledged: wide enough for a replica on a
// machine loaded by other test packages.
const (
	ackTimeout     = 300 * time.Millisecond
	liveAckTimeout = 3 * time.Second
)

func claimParams(id store.Identity, token string) store.ClaimParams {
	return store.ClaimParams{Identity: id, Fingerprint: "fp", Token: token, Lease: time.Minute, Retention: time.Hour}
}

func wantNotAcknowledged(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotAcknowledged) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%s: err = %v, want ErrNotAcknowledged (and ErrUnavailable)", what, err)
	}
}

// TestAcksFollowTheWriteOnItsConnection is the test (docs/durability.md,
// "Replica acknowledgements") that fails when the acknowledgement is asked on
// another connection than the write: with the only replica frozen, WAIT on the
// write's connection times out, while WAIT on any other connection answers at
// once that the replica has everything (it acknowledged that connection's
// offset, 0, long ago).
func TestAcksFollowTheWriteOnItsConnection(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	var acks ackLog
	prefix := randomPrefix()
	s := newStore(t, valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: prefix,
		Acks: valkey.Acks{Replicas: 1, Timeout: ackTimeout}, OnAck: acks.on})
	ctx := t.Context()
	done := store.Identity{Owner: "o", Scope: "r", Key: "acked"}
	untilAcked(t, "Claim with a live replica", claimed(s, claimParams(done, "t1")))
	pingEventually(t, s, 10*time.Second)

	replica.Pause()
	id := store.Identity{Owner: "o", Scope: "r", Key: "not-acked"}
	start := time.Now()
	_, err := s.Claim(ctx, claimParams(id, "t2"))
	wantNotAcknowledged(t, "Claim with the replica frozen", err)
	if took := time.Since(start); took < ackTimeout-50*time.Millisecond {
		t.Fatalf("Claim not acknowledged after %v, want it to wait for the %v acknowledgement timeout", took, ackTimeout)
	}

	// The mistake this guards against: the same script through the
	// client's ordinary path, then WAIT as a separate call, which the
	// client sends on another (dedicated) connection. It claims a fresh
	// key and "proves" that the frozen replica acknowledged it.
	c := raw(t, primary.Addr())
	wrongID := store.Identity{Owner: "o", Scope: "r", Key: "wrongly-acked"}
	lua := vk.NewLuaScript(valkey.Scripts()["claim.lua"])
	if err := lua.Exec(ctx, c, []string{valkey.Key(prefix, wrongID)},
		[]string{"o", "r", "wrongly-acked", "fp", "t3", "60000", "3600000", "0", "recipe"}).Error(); err != nil {
		t.Fatalf("claim.lua through Exec: %v", err)
	}
	n, err := c.Do(ctx, c.B().Wait().Numreplicas(1).Timeout(ackTimeout.Milliseconds()).Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("WAIT on a separate connection = %d, %v; want 1 at once (the trap the store must avoid)", n, err)
	}

	// A completion not acknowledged fails, but the record is completed on
	// the primary, and a repeat by the same token re-confirms it.
	_, err = s.Complete(ctx, done, "t1", store.Response{Status: 201, Body: []byte("made")})
	wantNotAcknowledged(t, "Complete with the replica frozen", err)
	if out, err := primary.CLI("HGET", s.Key(done), "s"); err != nil || out != "completed" {
		t.Fatalf("record state on the primary after an unacknowledged Complete = %q, %v; want completed", out, err)
	}
	// Not handed out before it is acknowledged (TestAcksReplayOnlyAcknowledged).
	if rec, err := s.Get(ctx, done); rec != nil || !errors.Is(err, store.ErrNotAcknowledged) {
		t.Fatalf("Get after an unacknowledged Complete = %+v, %v; want ErrNotAcknowledged", rec, err)
	}
	_, err = s.Extend(ctx, id, "t2", time.Minute)
	wantNotAcknowledged(t, "Extend with the replica frozen", err)

	replica.Resume()
	untilAcked(t, "repeated Complete by the completing token after the replica is back", func() error {
		ok, err := s.Complete(ctx, done, "t1", store.Response{Status: 500, Body: []byte("other")})
		if err == nil && !ok {
			err = errors.New("answered false, want true")
		}
		return err
	})
	if ok, err := s.Complete(ctx, done, "not-t1", store.Response{Status: 500}); err != nil || ok {
		t.Fatalf("Complete by another token on a completed record = %v, %v; want false", ok, err)
	}
	rec, err := s.Get(ctx, done)
	if err != nil || rec == nil || rec.Response == nil || string(rec.Response.Body) != "made" {
		t.Fatalf("record after the repeat = %+v, %v; want the first response kept", rec, err)
	}
	// Acknowledged: the replica has the completion.
	if out, err := replica.CLI("HGET", s.Key(done), "s"); err != nil || out != "completed" {
		t.Fatalf("record state on the replica = %q, %v; want completed", out, err)
	}

	// NOSCRIPT: the pair is sent again with EVAL.
	if _, err := primary.CLI("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	again := store.Identity{Owner: "o", Scope: "r", Key: "after-flush"}
	untilAcked(t, "Claim after SCRIPT FLUSH", claimed(s, claimParams(again, "t4")))
	if out, err := replica.CLI("HGET", s.Key(again), "t"); err != nil || out != "t4" {
		t.Fatalf("claim on the replica after SCRIPT FLUSH = %q, %v", out, err)
	}
	want := "claim:true claim:false complete:false extend:false complete:true claim:true"
	if got := acks.collapsed(); got != want {
		t.Fatalf("OnAck calls = %q (%q with untilAcked's retries), want %q", got, acks.String(), want)
	}
}

func TestAcksPingNamesMissingReplicas(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 2, Timeout: ackTimeout}})
	err := s.Ping(t.Context())
	wantNotAcknowledged(t, "Ping with 1 replica, acks.replicas 2", err)
	if !strings.Contains(err.Error(), primary.Addr()) {
		t.Fatalf("Ping error %q does not name the primary %s", err, primary.Addr())
	}
	one := newStore(t, valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 1, Timeout: ackTimeout}})
	pingEventually(t, one, 10*time.Second)
	// A frozen replica stays connected but stops acknowledging: once its
	// lag passes the bound, readiness says so.
	replica.Pause()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := one.Ping(t.Context())
		if errors.Is(err, store.ErrNotAcknowledged) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping 15s after the replica froze = %v; want ErrNotAcknowledged", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestAcksAOFLocal(t *testing.T) {
	// WAITAOF counts the replicas that fsynced the write to their own AOF:
	// the replicas need appendonly too.
	primary := valkeytest.Start(t, valkeytest.WithAOF())
	valkeytest.StartReplica(t, primary.Addr(), valkeytest.WithAOF())
	s := newStore(t, valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 1, AOFLocal: true, Timeout: time.Second}})
	id := store.Identity{Owner: "o", Scope: "r", Key: "aof"}
	untilAcked(t, "Claim with WAITAOF", claimed(s, claimParams(id, "t")))
	// WAITAOF on a primary without appendonly is refused: every write fails
	// closed (not "acknowledged").
	noAOF := valkeytest.Start(t)
	bad := newStore(t, valkey.Options{Addrs: []string{noAOF.Addr()}, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{AOFLocal: true, Timeout: time.Second}})
	if _, err := bad.Claim(t.Context(), claimParams(id, "t")); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Claim with WAITAOF on a primary without AOF: err = %v, want ErrUnavailable", err)
	}
}

func TestAcksSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	sen := valkeytest.StartSentinel(t, primary, "idemgate-acks")
	s := newStore(t, valkey.Options{Addrs: []string{sen.Addr()}, SentinelMaster: sen.MasterName, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 1, Timeout: ackTimeout}})
	id := store.Identity{Owner: "o", Scope: "r", Key: "sentinel-acked"}
	untilAcked(t, "Claim through sentinel with a live replica", claimed(s, claimParams(id, "t")))
	replica.Pause()
	_, err := s.Claim(t.Context(), claimParams(store.Identity{Owner: "o", Scope: "r", Key: "sentinel-frozen"}, "t"))
	wantNotAcknowledged(t, "Claim through sentinel with the replica frozen", err)
}

// TestAcksCluster checks that the acknowledgement is asked on the node that
// owns each key's slot: keys spread over three shards, each with one
// replica, are all acknowledged, and freezing one shard's replica fails
// exactly the claims of that shard.
func TestAcksCluster(t *testing.T) {
	c := valkeytest.StartClusterWithReplicas(t, 3)
	var acks ackLog
	s := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 1, Timeout: ackTimeout}, OnAck: acks.on})
	ctx := t.Context()
	pingEventually(t, s, 10*time.Second)
	frozen := c.Replicas[0]
	owner := c.Servers[0]
	ids := make([]store.Identity, 24)
	onFrozen := 0
	for i := range ids {
		ids[i] = store.Identity{Owner: "o", Scope: "r", Key: "k" + string(rune('a'+i))}
		untilAcked(t, fmt.Sprintf("Claim %d", i), claimed(s, claimParams(ids[i], "t")))
		if out, _ := owner.CLI("EXISTS", s.Key(ids[i])); out == "1" {
			onFrozen++
		}
	}
	if onFrozen == 0 || onFrozen == len(ids) {
		t.Fatalf("%d of %d keys on shard 0; want some on each side", onFrozen, len(ids))
	}
	frozen.Pause()
	failed := 0
	for i, id := range ids {
		id.Key += "-2"
		_, err := s.Claim(ctx, claimParams(id, "t"))
		out, _ := owner.CLI("EXISTS", s.Key(id))
		switch {
		case out == "1":
			wantNotAcknowledged(t, "Claim on the shard whose replica is frozen", err)
			failed++
		case errors.Is(err, store.ErrNotAcknowledged):
			untilAcked(t, fmt.Sprintf("Claim %d on a shard with a live replica", i), claimed(s, claimParams(id, "t")))
		case err != nil:
			t.Fatalf("Claim %d on a shard with a live replica: %v", i, err)
		}
	}
	if failed == 0 {
		t.Fatal("no claim landed on the frozen replica's shard")
	}
	frozen.Resume()
	pingEventually(t, s, 10*time.Second)
}

// pingEventually waits up to d for s.Ping to succeed: a replica that just
// linked up (or resumed) is counted once the primary has its first
// acknowledgement.
func pingEventually(t *testing.T, s *valkey.Store, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		pctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := s.Ping(pctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping not ok after %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAcksNotHeldFromAPrimaryThatLostTheRecord: the primary that holds a
// claim, acknowledged by its replica, comes back empty (no persistence) and
// without a replica, as the old primary of a failed-over Sentinel set does
// while its clients still follow it. Its "the token does not hold the
// record" answer to the holder's Complete and Extend is not taken as the
// claim's loss: it fails with ErrNotAcknowledged, so the holder keeps its
// response and retries until it reaches a primary that has the claim.
func TestAcksNotHeldFromAPrimaryThatLostTheRecord(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: randomPrefix(),
		Acks: valkey.Acks{Replicas: 1, Timeout: ackTimeout}})
	ctx := t.Context()
	id := store.Identity{Owner: "o", Scope: "r", Key: "lost-by-the-primary"}
	untilAcked(t, "Claim with a live replica", claimed(s, claimParams(id, "t1")))

	replica.Kill()
	primary.Kill()
	primary.Restart() // empty, and nothing replicates it
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ok bool
		ok, err = s.Complete(ctx, id, "t1", store.Response{Status: 201, Body: []byte("made")})
		if ok {
			t.Fatal("Complete on a primary without the record answered true")
		}
		// A reconnect after the restart fails the first calls with a
		// connection error: wait for the primary's own answer.
		if err == nil || errors.Is(err, store.ErrNotAcknowledged) || time.Now().After(deadline) {
			break
		}
	}
	wantNotAcknowledged(t, "Complete on the empty primary", err)
	_, err = s.Extend(ctx, id, "t1", time.Minute)
	wantNotAcknowledged(t, "Extend on the empty primary", err)
}

// TestAcksReplayOnlyAcknowledged: a completion its replica has not
// acknowledged (the holder withholds it from its own client on a takeover
// route) is not handed out by another instance either: its Claim, Get and
// replay cache refuse it, since a failover that lost it would let the
// operation run again after a client was told its result. Once the
// replica is back, the same calls replay it. Every layout; in Cluster
// mode too, where the acknowledgement's fence (fenceCmd) is a key in the record's
// slot.
func TestAcksReplayOnlyAcknowledged(t *testing.T) {
	for _, layout := range []int{valkey.Layout3, valkey.Layout4, valkey.Layout5} {
		t.Run(fmt.Sprintf("layout%d", layout), func(t *testing.T) {
			primary := valkeytest.Start(t)
			replica := valkeytest.StartReplica(t, primary.Addr())
			testReplayOnlyAcknowledged(t, []string{primary.Addr()}, replica, layout)
		})
	}
	t.Run("cluster", func(t *testing.T) {
		c := valkeytest.StartClusterWithReplicas(t, 3)
		testReplayOnlyAcknowledged(t, c.Addrs(), nil, valkey.Layout4, c.Replicas...)
	})
}

// testReplayOnlyAcknowledged freezes frozen (all of them: in Cluster mode
// every shard's replica, wherever the key lands) between the holder's
// claim and its completion.
func testReplayOnlyAcknowledged(t *testing.T, addrs []string, replica *valkeytest.Server, layout int, more ...*valkeytest.Server) {
	frozen := more
	if replica != nil {
		frozen = append(frozen, replica)
	}
	prefix := randomPrefix()
	acks := valkey.Acks{Replicas: 1, Timeout: ackTimeout}
	holder := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Acks: acks, Layout: layout})
	other := newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: prefix, Acks: acks, Layout: layout, CacheBytes: 1 << 20})
	ctx := t.Context()
	pingEventually(t, holder, 10*time.Second)
	id := store.Identity{Owner: "o", Scope: "r", Key: "unacknowledged-completion"}
	untilAcked(t, "Claim with a live replica", claimed(holder, claimParams(id, "t1")))
	for _, r := range frozen {
		r.Pause()
	}
	_, err := holder.Complete(ctx, id, "t1", store.Response{Status: 201, Body: []byte("made")})
	wantNotAcknowledged(t, "Complete with the replica frozen", err)

	res, err := other.Claim(ctx, claimParams(id, "t2"))
	t.Logf("another instance's Claim while the completion is not acknowledged: state=%v body=%q err=%v", res.State, body(res.Response), err)
	wantNotAcknowledged(t, "another instance's Claim of the unacknowledged completion", err)
	rec, err := other.Get(ctx, id)
	if rec != nil {
		t.Errorf("another instance's Get of the unacknowledged completion answered %v %q", rec.State, body(rec.Response))
	}
	wantNotAcknowledged(t, "another instance's Get of the unacknowledged completion", err)
	for range 3 {
		rec, _, err := other.CachedReplay(ctx, id)
		if rec != nil {
			t.Fatalf("the replay cache handed out the unacknowledged completion %q", body(rec.Response))
		}
		if err != nil {
			t.Fatalf("CachedReplay: %v", err)
		}
	}

	for _, r := range frozen {
		r.Resume()
	}
	pingEventually(t, other, 10*time.Second)
	untilAcked(t, "Claim replaying the acknowledged completion", func() error {
		res, err := other.Claim(ctx, claimParams(id, "t2"))
		if err == nil && (res.State != store.Completed || body(res.Response) != "made") {
			err = fmt.Errorf("claim answered %v %q, want completed \"made\"", res.State, body(res.Response))
		}
		return err
	})
	untilAcked(t, "Get of the acknowledged completion", func() error {
		rec, err := other.Get(ctx, id)
		if err == nil && (rec == nil || rec.State != store.Completed || body(rec.Response) != "made") {
			err = fmt.Errorf("get answered %+v, want completed \"made\"", rec)
		}
		return err
	})
	// Acknowledged now: the replay cache answers it, at the latest once a
	// claim has acknowledged what its first read found.
	for i := 0; ; i++ {
		rec, _, err := other.CachedReplay(ctx, id)
		if err != nil {
			t.Fatalf("CachedReplay: %v", err)
		}
		if rec != nil {
			if body(rec.Response) != "made" {
				t.Fatalf("CachedReplay answered %q", body(rec.Response))
			}
			break
		}
		if i == 3 {
			t.Fatal("the replay cache never answered the acknowledged completion")
		}
		untilAcked(t, "Claim after a cache miss", func() error {
			_, err := other.Claim(ctx, claimParams(id, "t2"))
			return err
		})
	}
}

// body is r's body, "" for none.
func body(r *store.Response) string {
	if r == nil {
		return ""
	}
	return string(r.Body)
}
