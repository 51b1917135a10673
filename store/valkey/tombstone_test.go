package valkey_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestTombstoneLayout checks the index key and the tombstone byte for byte
// (docs/protocol.md, "Resource index and tombstones"): the index is a
// sorted set scored by the records' expiry that expires with its latest
// member (no expiry while one has retention 0), a tombstone keeps only s,
// x, o, r, k, c and v and its key's expiry, and a layout 2 record (stored
// at in its sa field) is tombstoned too.
func TestTombstoneLayout(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()})
	ctx := t.Context()
	path := "/v1/orders/1"
	res := store.Resource{Owner: "alice", Scope: "default", Path: path}
	idx := valkey.IndexKey(s.KeyPrefix(), res)
	if want := s.KeyPrefix() + "index:{"; idx[:len(want)] != want || len(idx) != len(want)+65 {
		t.Fatalf("IndexKey = %q", idx)
	}

	complete := func(key string, retention time.Duration) store.Identity {
		id := store.Identity{Owner: "alice", Scope: "default", Key: key}
		if r, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t-" + key, Lease: time.Minute, Retention: retention}); err != nil || r.State != store.Claimed {
			t.Fatalf("Claim = %+v, %v", r, err)
		}
		ok, err := s.Complete(ctx, id, "t-"+key, store.Response{Status: 201, Header: http.Header{"Location": {path}}})
		if !ok || err != nil {
			t.Fatalf("Complete = %v, %v", ok, err)
		}
		if err := s.Index(ctx, path, id); err != nil {
			t.Fatalf("Index: %v", err)
		}
		return id
	}
	a := complete("a", time.Hour)
	ra, err := s.Get(ctx, a)
	if err != nil || ra == nil {
		t.Fatalf("Get = %+v, %v", ra, err)
	}
	members, err := c.Do(ctx, c.B().Zrange().Key(idx).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil || len(members) != 1 {
		t.Fatalf("index = %+v, %v", members, err)
	}
	wantMember := s.Key(a)[len(s.KeyPrefix())+1:len(s.Key(a))-1] + ":" + strconv.FormatInt(ra.Response.StoredAt.UnixMilli(), 10)
	if members[0].Member != wantMember || int64(members[0].Score) != ra.RetentionEnd.UnixMilli() {
		t.Fatalf("index entry = %+v, want %s scored %d", members[0], wantMember, ra.RetentionEnd.UnixMilli())
	}
	if at, err := c.Do(ctx, c.B().Pexpiretime().Key(idx).Build()).AsInt64(); err != nil || at != ra.RetentionEnd.UnixMilli() {
		t.Fatalf("index PEXPIRETIME = %d, %v; want %d", at, err, ra.RetentionEnd.UnixMilli())
	}
	complete("forever", 0)
	if ttl := pttl(t, c, idx); ttl != -1 {
		t.Fatalf("index PTTL with a retention 0 member = %d, want -1 (no expiry)", ttl)
	}

	// A layout 2 completed record, written as a build before layout 3 did.
	now := serverTime(t, c).UnixMilli()
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	old := store.Identity{Owner: "alice", Scope: "default", Key: "layout2"}
	if err := c.Do(ctx, c.B().Hset().Key(s.Key(old)).FieldValue().
		FieldValue("o", old.Owner).FieldValue("r", old.Scope).FieldValue("k", old.Key).
		FieldValue("s", "completed").FieldValue("f", "hs1:fp").FieldValue("c", ms(now-1000)).
		FieldValue("x", ms(now+3600000)).FieldValue("rt", "3600000").FieldValue("v", "2").FieldValue("fr", "r").
		FieldValue("st", "201").FieldValue("h", "").FieldValue("b", `{}`).FieldValue("om", "0").
		FieldValue("sa", ms(now-500)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Pexpireat().Key(s.Key(old)).MillisecondsTimestamp(now+3600000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := s.Index(ctx, path, old); err != nil {
		t.Fatalf("Index of a layout 2 record: %v", err)
	}

	if n, err := s.Tombstone(ctx, res); n != 3 || err != nil {
		t.Fatalf("Tombstone = %d, %v; want 3", n, err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(idx).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("index after Tombstone: EXISTS = %d, %v; want its entries spent", n, err)
	}
	for _, id := range []store.Identity{a, old} {
		f, err := c.Do(ctx, c.B().Hgetall().Key(s.Key(id)).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != 7 || f["s"] != "gone" || f["o"] != id.Owner || f["r"] != id.Scope || f["k"] != id.Key || f["v"] != "3" || f["c"] == "" {
			t.Fatalf("tombstone of %s = %q", id.Key, f)
		}
		at, err := c.Do(ctx, c.B().Pexpiretime().Key(s.Key(id)).Build()).AsInt64()
		if err != nil || strconv.FormatInt(at, 10) != f["x"] {
			t.Fatalf("tombstone PEXPIRETIME = %d, %v; want x = %s", at, err, f["x"])
		}
		r, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t9", Lease: time.Minute})
		if err != nil || r.State != store.Gone {
			t.Fatalf("Claim of the tombstone = %+v, %v", r, err)
		}
	}
	if ttl := pttl(t, c, s.Key(store.Identity{Owner: "alice", Scope: "default", Key: "forever"})); ttl != -1 {
		t.Fatalf("tombstone of a retention 0 record: PTTL = %d, want -1", ttl)
	}
}
