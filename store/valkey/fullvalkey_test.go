package valkey_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFullValkeyReplaysCompleted: on a full Valkey (maxmemory-policy
// noeviction) claim.lua is refused with -OOM whatever it would answer,
// because it may write; a completed record or a tombstone needs no write,
// so Claim answers them from a read (get.lua, no-writes) exactly as
// claim.lua answers them on a server with memory, fingerprint and recipe
// included, so the caller still tells a reused key from a retry; so do a
// record running under another token and an abandoned one not taken over.
// Every answer that would need a write (a fresh or ended record, the
// holder's own repeated claim, a takeover) and a record of another
// identity under the key stay the -OOM error, and nothing is written. Both Claim paths are covered: the plain
// script and the one sent with an acknowledgement (acks on).
func TestFullValkeyReplaysCompleted(t *testing.T) {
	srv := valkeytest.Start(t, valkeytest.WithAOF(), valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	c := raw(t, srv.Addr())
	prefix := randomPrefix()
	stores := map[string]*valkey.Store{
		"plain": newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix}),
		"acks":  newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Acks: valkey.Acks{AOFLocal: true, Timeout: time.Second}}),
	}
	s := stores["plain"]
	opCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	id := func(key string) store.Identity { return store.Identity{Owner: "alice", Scope: "default", Key: key} }
	params := func(key, fp, token string) store.ClaimParams {
		return store.ClaimParams{Identity: id(key), Fingerprint: fp, Recipe: "b=raw&v=hs1", Token: token, Lease: time.Minute, Retention: time.Hour}
	}
	claimed := func(p store.ClaimParams) store.ClaimResult {
		t.Helper()
		res, err := s.Claim(opCtx(), p)
		if err != nil || res.State != store.Claimed {
			t.Fatalf("Claim(%s) = %+v, %v", p.Identity.Key, res, err)
		}
		return res
	}
	complete := func(key string, resp store.Response) {
		t.Helper()
		claimed(params(key, "fp", "t-"+key))
		if ok, err := s.Complete(opCtx(), id(key), "t-"+key, resp); !ok || err != nil {
			t.Fatalf("Complete(%s) = %v, %v", key, ok, err)
		}
	}

	// A completed record of layout 3, its body large enough to be stored
	// compressed, with headers and trailers.
	body := bytes.Repeat([]byte(`{"order":1,"items":["a","b","c"]},`), 400)
	complete("done", store.Response{Status: 201,
		Header:  http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "Location": {"/v1/orders/1"}},
		Body:    body,
		Trailer: http.Header{"Grpc-Status": {"0"}}})
	// What a replay answers while the server has memory.
	want, err := s.Claim(opCtx(), params("done", "fp", "replay"))
	if err != nil || want.State != store.Completed || !bytes.Equal(want.Response.Body, body) {
		t.Fatalf("replay Claim before the server is full = %+v, %v", want, err)
	}

	// A completed record of layout 2, written as a build before layout 3 did.
	now := serverTime(t, c).UnixMilli()
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	layout2 := func(key, owner string) {
		t.Helper()
		k := s.Key(id(key))
		if err := c.Do(t.Context(), c.B().Hset().Key(k).FieldValue().
			FieldValue("o", owner).FieldValue("r", "default").FieldValue("k", key).
			FieldValue("s", "completed").FieldValue("f", "fp").FieldValue("c", ms(now-1000)).
			FieldValue("x", ms(now+3600000)).FieldValue("rt", "3600000").FieldValue("v", "2").FieldValue("fr", "b=raw&v=hs1").
			FieldValue("st", "200").FieldValue("h", string(valkey.EncodeHeader(http.Header{"Etag": {`"2"`}}))).
			FieldValue("b", `{"layout":2}`).FieldValue("om", "0").FieldValue("sa", ms(now-500)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(t.Context(), c.B().Pexpireat().Key(k).MillisecondsTimestamp(now+3600000).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	layout2("layout2", "alice")
	wantLayout2, err := s.Claim(opCtx(), params("layout2", "fp", "replay"))
	if err != nil || wantLayout2.State != store.Completed {
		t.Fatalf("replay Claim of the layout 2 record before the server is full = %+v, %v", wantLayout2, err)
	}
	// The same key holding another owner's record (by hand: only a SHA-256
	// collision would put it there): never answered to alice.
	layout2("foreign", "mallory")

	// A tombstone.
	complete("tomb", store.Response{Status: 201, Header: http.Header{"Location": {"/v1/orders/9"}}})
	if err := s.Index(opCtx(), "/v1/orders/9", id("tomb")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Tombstone(opCtx(), store.Resource{Owner: "alice", Scope: "default", Path: "/v1/orders/9"}); n != 1 || err != nil {
		t.Fatalf("Tombstone = %d, %v", n, err)
	}

	// A completed record whose stored body lost its last bytes: never
	// replayed, whether the server is full or not.
	complete("damaged", store.Response{Status: 201, Body: []byte(`{"short":"body"}`)})
	cutRecord(t, c, s.Key(id("damaged")), 5)
	if res, err := s.Claim(opCtx(), params("damaged", "fp", "replay")); !errors.Is(err, store.ErrStoredResponseDamaged) {
		t.Fatalf("Claim of the damaged record before the server is full = %+v, %v; want ErrStoredResponseDamaged", res, err)
	}

	// A running record, one whose lease will have ended (abandoned), and a
	// completed record whose retention will have ended.
	claimed(params("running", "fp", "holder"))
	shortLease := params("abandoned", "fp", "gone-holder")
	shortLease.Lease = 200 * time.Millisecond
	lapsed := claimed(shortLease)
	shortRetention := params("ended", "fp", "t-ended")
	// Long enough that the Get after Complete still finds the record on a
	// loaded machine (the record of a 150 ms retention was seen gone one
	// round trip later, storetest); the test waits for it to pass anyway.
	shortRetention.Retention = 2 * time.Second
	claimed(shortRetention)
	if ok, err := s.Complete(opCtx(), id("ended"), "t-ended", store.Response{Status: 201, Body: []byte("ended")}); !ok || err != nil {
		t.Fatalf("Complete(ended) = %v, %v", ok, err)
	}
	ended, err := s.Get(opCtx(), id("ended"))
	if err != nil || ended == nil {
		t.Fatalf("Get(ended) = %+v, %v", ended, err)
	}

	free := srv.Fill(t)
	defer free()
	time.Sleep(time.Until(later(lapsed.LeaseEnd, ended.RetentionEnd)) + 50*time.Millisecond)

	for name, st := range stores {
		claim := func(p store.ClaimParams) (store.ClaimResult, error) {
			return st.Claim(opCtx(), p)
		}
		// Replays: the answer a server with memory gives, byte for byte.
		for _, fp := range []string{"fp", "another request"} {
			res, err := claim(params("done", fp, "r-"+name))
			if err != nil || !reflect.DeepEqual(res, want) {
				t.Errorf("%s: Claim of the completed record (fingerprint %q) on a full Valkey = %+v, %v; want %+v", name, fp, res, err, want)
			}
		}
		if res, err := claim(params("layout2", "fp", "r-"+name)); err != nil || !reflect.DeepEqual(res, wantLayout2) {
			t.Errorf("%s: Claim of the layout 2 record on a full Valkey = %+v, %v; want %+v", name, res, err, wantLayout2)
		}
		if res, err := claim(params("tomb", "fp", "r-"+name)); err != nil || res.State != store.Gone {
			t.Errorf("%s: Claim of the tombstone on a full Valkey = %+v, %v; want Gone", name, res, err)
		}
		if res, err := claim(params("damaged", "fp", "r-"+name)); !errors.Is(err, store.ErrStoredResponseDamaged) || res.State != store.Absent {
			t.Errorf("%s: Claim of the damaged record on a full Valkey = %+v, %v; want ErrStoredResponseDamaged", name, res, err)
		}

		// A running record, and an abandoned one that is not taken over,
		// answer as claim.lua does before its first write
		// (TestFaultValkeyFullFailOpenKeepsARunningCallOnce).
		takeover := shortLease
		takeover.Token = "taker-" + name
		noTakeover := takeover
		noTakeover.NoTakeover = true
		otherRequest := takeover
		otherRequest.Fingerprint = "another request"
		if res, err := claim(params("running", "fp", "dup-"+name)); err != nil || res.State != store.Running || res.Fingerprint != "fp" || res.Recipe != "b=raw&v=hs1" || res.LeaseEnd.IsZero() {
			t.Errorf("%s: Claim of a running record on a full Valkey = %+v, %v; want Running with its fingerprint, recipe and lease end", name, res, err)
		}
		for what, p := range map[string]store.ClaimParams{"NoTakeover": noTakeover, "another fingerprint": otherRequest} {
			if res, err := claim(p); err != nil || res.State != store.Abandoned || res.Fingerprint != "fp" || !res.LeaseEnd.Equal(lapsed.LeaseEnd) {
				t.Errorf("%s: Claim of an abandoned record (%s) on a full Valkey = %+v, %v; want Abandoned with its fingerprint and lease end %v", name, what, res, err, lapsed.LeaseEnd)
			}
		}

		// Whatever would need a write stays refused.
		for what, p := range map[string]store.ClaimParams{
			"a free identity":                 params("fresh-"+name, "fp", "f"),
			"the running record's own token":  params("running", "fp", "holder"),
			"an abandoned record (takeover)":  takeover,
			"a record past its retention end": params("ended", "fp", "e-"+name),
			"another identity's record":       params("foreign", "fp", "x-"+name),
		} {
			res, err := claim(p)
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") || res.State != store.Absent {
				t.Errorf("%s: Claim of %s on a full Valkey = %+v, %v; want the server's OOM refusal", name, what, res, err)
			}
		}
	}

	free()
	// Nothing was written while full.
	for key, token := range map[string]string{"running": "holder", "abandoned": "gone-holder"} {
		if r, err := s.Get(opCtx(), id(key)); err != nil || r == nil || r.Token != token {
			t.Errorf("Get(%s) after memory was freed = %+v, %v; want it still held by %s", key, r, err, token)
		}
	}
	for _, key := range []string{"fresh-plain", "fresh-acks", "ended"} {
		if r, err := s.Get(opCtx(), id(key)); r != nil || err != nil {
			t.Errorf("Get(%s) after memory was freed = %+v, %v; want nil", key, r, err)
		}
	}
	if res, err := s.Claim(opCtx(), params("done", "fp", "after")); err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("replay Claim after memory was freed = %+v, %v; want %+v", res, err, want)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// cutRecord rewrites the layout 3 record at key with its last n bytes cut
// (the p fields joined, kept as one field p0), as a lost write would leave
// it.
func cutRecord(t *testing.T, c vk.Client, key string, n int) {
	t.Helper()
	ctx := t.Context()
	pn, err := c.Do(ctx, c.B().Hget().Key(key).Field("pn").Build()).ToString()
	if err != nil {
		t.Fatalf("%s has no pn field: %v", key, err)
	}
	parts, _ := strconv.Atoi(pn)
	var rec strings.Builder
	for i := range parts {
		p, err := c.Do(ctx, c.B().Hget().Key(key).Field("p"+strconv.Itoa(i)).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		rec.WriteString(p)
		if err := c.Do(ctx, c.B().Hdel().Key(key).Field("p"+strconv.Itoa(i)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("pn", "1").FieldValue("p0", rec.String()[:rec.Len()-n]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}
