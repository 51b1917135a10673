package valkey_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
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

func randomPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "test-" + hex.EncodeToString(b) + ":"
}

func newStore(t testing.TB, opts valkey.Options) *valkey.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := valkey.New(ctx, opts)
	if err != nil {
		t.Fatalf("valkey.New(%v): %v", opts.Addrs, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func harness(addrs []string) storetest.Harness { return harnessLayouts(addrs, 0, 0) }

// harnessLayouts is harness whose store writes layout and whose peers
// (other instances on the same keys) write peerLayout.
func harnessLayouts(addrs []string, layout, peerLayout int) storetest.Harness {
	return storetest.Harness{
		NewStore: func(t *testing.T, _ *storetest.Clock) store.Store {
			return newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: randomPrefix(), Layout: layout})
		},
		NewPeer: func(t *testing.T, s store.Store, _ *storetest.Clock) store.Store {
			return newStore(t, valkey.Options{Addrs: addrs, KeyPrefix: s.(*valkey.Store).KeyPrefix(), Layout: peerLayout})
		},
	}
}

func TestContractStandalone(t *testing.T) {
	srv := valkeytest.Start(t)
	storetest.RunHarness(t, harness([]string{srv.Addr()}))
}

// TestContractLayout4 runs the contract on records of layout 4, and on a
// fleet mid-upgrade: a store writing one layout beside peers writing the
// other, every record read by both (docs/protocol.md, "Rolling upgrade to
// layout 4").
func TestContractLayout4(t *testing.T) {
	srv := valkeytest.Start(t)
	addrs := []string{srv.Addr()}
	t.Run("Layout4", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout4, valkey.Layout4)) })
	t.Run("Cluster", func(t *testing.T) {
		c := valkeytest.StartCluster(t, 3)
		storetest.RunHarness(t, harnessLayouts(c.Addrs(), valkey.Layout4, valkey.Layout3))
	})
	t.Run("Writes4Peers3", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout4, valkey.Layout3)) })
	t.Run("Writes3Peers4", func(t *testing.T) { storetest.RunHarness(t, harnessLayouts(addrs, valkey.Layout3, valkey.Layout4)) })
}

func TestContractCluster(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	storetest.RunHarness(t, harness(c.Addrs()))
}

func TestContractSentinel(t *testing.T) {
	srv := valkeytest.Start(t)
	sen := valkeytest.StartSentinel(t, srv, "idemgate-test")
	s := newStore(t, valkey.Options{Addrs: []string{sen.Addr()}, SentinelMaster: sen.MasterName, KeyPrefix: randomPrefix()})
	ctx := t.Context()
	id := store.Identity{Owner: "o", Scope: "r", Key: "sentinel"}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
	if err != nil || res.State != store.Claimed {
		t.Fatalf("Claim through sentinel = %+v, %v", res, err)
	}
	// The record is on the master the sentinel named.
	if out, err := srv.CLI("EXISTS", s.Key(id)); err != nil || out != "1" {
		t.Fatalf("EXISTS on master = %q, %v", out, err)
	}
}

// raw returns a plain client to srv for inspecting keys.
func raw(t testing.TB, addr string) vk.Client {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("raw client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func serverTime(t *testing.T, c vk.Client) time.Time {
	t.Helper()
	v, err := c.Do(t.Context(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	sec, _ := strconv.ParseInt(v[0], 10, 64)
	usec, _ := strconv.ParseInt(v[1], 10, 64)
	return time.Unix(sec, usec*1000)
}

func pttl(t *testing.T, c vk.Client, key string) int64 {
	t.Helper()
	n, err := c.Do(t.Context(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return n
}

func TestTimesAreServerTimes(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()})
	ctx := t.Context()
	id := store.Identity{Owner: "o", Scope: "r", Key: "clock"}
	before := serverTime(t, c).Truncate(time.Millisecond)
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
	if err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	after := serverTime(t, c)
	r, err := s.Get(ctx, id)
	if err != nil || r == nil {
		t.Fatalf("Get: %+v %v", r, err)
	}
	if r.CreatedAt.Before(before) || r.CreatedAt.After(after) {
		t.Fatalf("CreatedAt %v outside the server's TIME window [%v, %v]", r.CreatedAt, before, after)
	}
	// The stored field is the same server time in unix ms.
	created, err := c.Do(ctx, c.B().Hget().Key(s.Key(id)).Field("c").Build()).ToString()
	if err != nil || created != strconv.FormatInt(r.CreatedAt.UnixMilli(), 10) {
		t.Fatalf("field c = %q (%v), want %d", created, err, r.CreatedAt.UnixMilli())
	}
	// PEXPIRETIME is the record's end to the millisecond, on the server's clock.
	exp, err := c.Do(ctx, c.B().Pexpiretime().Key(s.Key(id)).Build()).AsInt64()
	if err != nil || exp != r.RetentionEnd.UnixMilli() {
		t.Fatalf("PEXPIRETIME = %d (%v), want RetentionEnd %d", exp, err, r.RetentionEnd.UnixMilli())
	}
}

func TestExpiryIsAlwaysSet(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()})
	ctx := t.Context()
	// The lease and the middle retention only need to be unequal (the
	// running expiry is the longer of the two) and long enough that the key
	// cannot expire between a write and the PTTL that checks it: with
	// 150 ms and 50 ms, a loaded machine's round trips let the key expire
	// first, and PTTL answered -2 or the Extend found no record.
	const lease = 10 * time.Second
	for _, retention := range []time.Duration{0, 5 * time.Second, time.Hour} {
		id := store.Identity{Owner: "o", Scope: "r", Key: "ttl-" + retention.String()}
		key := s.Key(id)
		p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t1", Lease: lease, Retention: retention}
		check := func(when string, min, max int64) {
			t.Helper()
			if got := pttl(t, c, key); got < min || got > max {
				t.Fatalf("retention %v, %s: PTTL = %d, want %d..%d", retention, when, got, min, max)
			}
		}
		running := func(lease int64) (int64, int64) {
			if retention == 0 {
				return 1, lease + 86_400_000
			}
			return 1, max(lease, retention.Milliseconds())
		}
		if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim: %+v %v", res, err)
		}
		lo, hi := running(lease.Milliseconds())
		check("after Claim", lo, hi)
		if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
			t.Fatalf("repeated Claim: %+v %v", res, err)
		}
		check("after repeated Claim", lo, hi)
		if ok, err := s.Extend(ctx, id, "t1", time.Minute); !ok || err != nil {
			t.Fatalf("Extend: %v %v", ok, err)
		}
		lo, hi = running(60_000)
		check("after Extend", lo, hi)
		if ok, err := s.Complete(ctx, id, "t1", store.Response{Status: 200}); !ok || err != nil {
			t.Fatalf("Complete: %v %v", ok, err)
		}
		if retention == 0 {
			check("after Complete", -1, -1)
		} else {
			check("after Complete", 1, retention.Milliseconds())
		}
	}
	// A takeover writes a fresh expiry too.
	id := store.Identity{Owner: "o", Scope: "r", Key: "takeover"}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "a", Lease: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // let the lease pass
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "b", Lease: time.Minute})
	if err != nil || !res.Takeover {
		t.Fatalf("takeover Claim: %+v %v", res, err)
	}
	if got := pttl(t, c, s.Key(id)); got <= 60_000 || got > 60_000+86_400_000 {
		t.Fatalf("PTTL after takeover = %d, want lease + 24h", got)
	}
}

// TestKeyAllocatesOnce: Key, which runs two or three times per keyed
// request, allocates only the key it returns, and an identity longer than
// its stack buffer still hashes to the key of its bytes.
func TestKeyAllocatesOnce(t *testing.T) {
	id := store.Identity{Owner: "user-1234", Scope: "POST /v1/orders", Key: "123e4567-e89b-12d3-a456-426614174000"}
	if n := testing.AllocsPerRun(100, func() { _ = valkey.Key("idemgate:", id) }); n != 1 {
		t.Fatalf("Key allocates %v times, want 1", n)
	}
	long := store.Identity{Owner: strings.Repeat("o", 300), Scope: "POST /v1/orders", Key: "k"}
	if sum := sha256.Sum256(valkey.IdentityBytes(long)); valkey.Key("p:", long) != "p:{"+hex.EncodeToString(sum[:])+"}" {
		t.Fatalf("Key of a long identity = %q, want p:{hex SHA-256 of its bytes}", valkey.Key("p:", long))
	}
}

func TestRecordLayout(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: "layout:"})
	ctx := t.Context()
	id := store.Identity{Owner: "alice", Scope: "POST /orders", Key: "k1"}
	if got, want := s.Key(id), "layout:{"; !strings.HasPrefix(got, want) || !regexp.MustCompile(`^layout:\{[0-9a-f]{64}\}$`).MatchString(got) {
		t.Fatalf("Key = %q, want layout:{<64 lowercase hex>}", got)
	}
	wantBytes := []byte("\x00\x00\x00\x00\x00\x00\x00\x05alice\x00\x00\x00\x00\x00\x00\x00\x0cPOST /orders\x00\x00\x00\x00\x00\x00\x00\x02k1")
	if got := valkey.IdentityBytes(id); !bytes.Equal(got, wantBytes) {
		t.Fatalf("IdentityBytes = %q, want %q", got, wantBytes)
	}
	if sum := sha256.Sum256(wantBytes); s.Key(id) != "layout:{"+hex.EncodeToString(sum[:])+"}" {
		t.Fatalf("Key = %q, want layout:{hex SHA-256 of %q}", s.Key(id), wantBytes)
	}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Recipe: "b=raw&q=1&v=hs1", Token: "tok", Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fields, err := c.Do(ctx, c.B().Hgetall().Key(s.Key(id)).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"o": "alice", "r": "POST /orders", "k": "k1", "s": "running", "f": "fp", "t": "tok", "tk": "0", "rt": "3600000",
		"v": "3", "fr": "b=raw&q=1&v=hs1"} {
		if fields[f] != want {
			t.Fatalf("running record field %q = %q, want %q (all: %q)", f, fields[f], want, fields)
		}
	}
	for _, f := range []string{"c", "l", "x"} {
		if _, err := strconv.ParseInt(fields[f], 10, 64); err != nil {
			t.Fatalf("field %q = %q, want unix ms", f, fields[f])
		}
	}
	h := http.Header{"B": {"2"}, "A": {"1", "3"}}
	if ok, err := s.Complete(ctx, id, "tok", store.Response{Status: 201, Header: h, Body: []byte("body"), Omitted: true}); !ok || err != nil {
		t.Fatalf("Complete: %v %v", ok, err)
	}
	fields, err = c.Do(ctx, c.B().Hgetall().Key(s.Key(id)).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fields["t"]; ok {
		t.Fatalf("completed record keeps a token: %q", fields)
	}
	wantH := "\x00\x00\x00\x01A\x00\x00\x00\x011\x00\x00\x00\x01A\x00\x00\x00\x013\x00\x00\x00\x01B\x00\x00\x00\x012"
	// Layout 3: s, x, v, ct, pn and the record cut into 64-byte fields.
	var joined string
	for i := range len(fields) {
		joined += fields["p"+strconv.Itoa(i)]
	}
	prefix := "5:alice12:POST /orders2:k12:fp15:b=raw&q=1&v=hs1"
	fields7 := "\x27\xc9\x01" + string(rune(len(wantH))) + wantH
	check := binary.BigEndian.AppendUint32(nil, 4)
	check = binary.BigEndian.AppendUint32(check, crc32.Update(crc32.Checksum([]byte(fields7), crc32.MakeTable(crc32.Castagnoli)), crc32.MakeTable(crc32.Castagnoli), []byte("body")))
	if !strings.HasPrefix(joined, prefix) || !strings.HasSuffix(joined, fields7+string(check)+"body") {
		t.Fatalf("completed record p fields = %q, want %q ... flags 27 (checked), status 201, headers, check, body", joined, prefix)
	}
	for f, want := range map[string]string{"s": "completed", "v": "3", "ct": "tok", "pn": "2"} {
		if fields[f] != want {
			t.Fatalf("completed record field %q = %q, want %q (all: %q)", f, fields[f], want, fields)
		}
	}
	if len(fields["p0"]) != 64 || len(fields) != 7 {
		t.Fatalf("completed record fields %q, want s x v ct pn p0 (64 bytes) p1", fields)
	}
	if enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(s.Key(id)).Build()).ToString(); err != nil || enc != "listpack" {
		t.Fatalf("OBJECT ENCODING of a completed record = %q, %v; want listpack", enc, err)
	}
}

// TestReadsLayout1 writes records exactly as idemgate wrote them before
// layout 2 (no "v", no "fr"; docs/protocol.md, "Layout versions") and checks
// that every operation still reads them: a completed one replays with no
// recipe, a running one answers Running and completes.
func TestReadsLayout1(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}})
	ctx := t.Context()
	now := serverTime(t, c).UnixMilli()
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }

	done := store.Identity{Owner: "h:alice", Scope: "orders", Key: "done"}
	h := string(valkey.EncodeHeader(http.Header{"Location": {"/v1/orders/1"}}))
	if err := c.Do(ctx, c.B().Hset().Key(s.Key(done)).FieldValue().
		FieldValue("o", done.Owner).FieldValue("r", done.Scope).FieldValue("k", done.Key).
		FieldValue("s", "completed").FieldValue("f", "hs1:fp").FieldValue("c", ms(now-1000)).
		FieldValue("x", ms(now+3600000)).FieldValue("rt", "3600000").FieldValue("st", "201").
		FieldValue("h", h).FieldValue("b", `{"id":1}`).FieldValue("om", "0").FieldValue("sa", ms(now-500)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: done, Fingerprint: "hs1:other", Recipe: "b=raw&q=1&v=hs1", Token: "t1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != store.Completed || res.Recipe != "" || res.Fingerprint != "hs1:fp" || res.Response.Status != 201 ||
		string(res.Response.Body) != `{"id":1}` || res.Response.Header.Get("Location") != "/v1/orders/1" {
		t.Fatalf("Claim on a layout 1 completed record = %+v (%+v)", res, res.Response)
	}
	if r, err := s.Get(ctx, done); err != nil || r == nil || r.State != store.Completed || r.Recipe != "" {
		t.Fatalf("Get on a layout 1 completed record = %+v, %v", r, err)
	}

	running := store.Identity{Owner: "h:alice", Scope: "orders", Key: "running"}
	if err := c.Do(ctx, c.B().Hset().Key(s.Key(running)).FieldValue().
		FieldValue("o", running.Owner).FieldValue("r", running.Scope).FieldValue("k", running.Key).
		FieldValue("s", "running").FieldValue("f", "hs1:fp").FieldValue("t", "old-token").FieldValue("tk", "0").
		FieldValue("c", ms(now)).FieldValue("l", ms(now+60000)).FieldValue("x", ms(now+3600000)).
		FieldValue("rt", "3600000").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	res, err = s.Claim(ctx, store.ClaimParams{Identity: running, Fingerprint: "hs1:fp", Recipe: "b=raw&q=1&v=hs1", Token: "t2", Lease: time.Minute})
	if err != nil || res.State != store.Running || res.Recipe != "" {
		t.Fatalf("Claim on a layout 1 running record = %+v, %v", res, err)
	}
	if ok, err := s.Complete(ctx, running, "old-token", store.Response{Status: 200, Body: []byte("ok")}); !ok || err != nil {
		t.Fatalf("Complete of a layout 1 running record = %v, %v", ok, err)
	}
}

// TestReadsLayout2 writes a completed record exactly as idemgate wrote it
// in layout 2 (st, h, b, om, sa, tr fields; docs/protocol.md, "Layout
// versions") and checks that Claim and Get still replay it.
func TestReadsLayout2(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}})
	ctx := t.Context()
	now := serverTime(t, c).UnixMilli()
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	id := store.Identity{Owner: "h:alice", Scope: "default", Key: "done2"}
	h := string(valkey.EncodeHeader(http.Header{"Location": {"/v1/orders/1"}}))
	tr := string(valkey.EncodeHeader(http.Header{"Grpc-Status": {"0"}}))
	if err := c.Do(ctx, c.B().Hset().Key(s.Key(id)).FieldValue().
		FieldValue("o", id.Owner).FieldValue("r", id.Scope).FieldValue("k", id.Key).
		FieldValue("s", "completed").FieldValue("f", "hs1:fp").FieldValue("c", ms(now-1000)).
		FieldValue("x", ms(now+3600000)).FieldValue("rt", "3600000").FieldValue("v", "2").FieldValue("fr", "b=raw&q=1&v=hs1").
		FieldValue("st", "201").FieldValue("h", h).FieldValue("b", `{"id":1}`).FieldValue("om", "0").
		FieldValue("sa", ms(now-500)).FieldValue("ct", "t0").FieldValue("tr", tr).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "hs1:other", Recipe: "b=raw&q=1&v=hs1", Token: "t1", Lease: time.Minute})
	if err != nil || res.State != store.Completed || res.Recipe != "b=raw&q=1&v=hs1" || res.Fingerprint != "hs1:fp" ||
		res.Response.Status != 201 || string(res.Response.Body) != `{"id":1}` || res.Response.Trailer.Get("Grpc-Status") != "0" ||
		res.Response.Header.Get("Location") != "/v1/orders/1" || res.Response.StoredAt.UnixMilli() != now-500 {
		t.Fatalf("Claim on a layout 2 completed record = %+v, %v", res, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil || r == nil || r.State != store.Completed || r.Identity != id || string(r.Response.Body) != `{"id":1}` {
		t.Fatalf("Get on a layout 2 completed record = %+v, %v", r, err)
	}
}

func TestHeaderEncoding(t *testing.T) {
	h := http.Header{"Set-Cookie": {"a=1", "b=2"}, "x-lower": {""}, "": {"empty name"}}
	got, err := valkey.DecodeHeader(valkey.EncodeHeader(h))
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("round trip = %#v, %v; want %#v", got, err, h)
	}
	if got, err := valkey.DecodeHeader(nil); got != nil || err != nil {
		t.Fatalf("DecodeHeader(nil) = %v, %v", got, err)
	}
	enc := valkey.EncodeHeader(http.Header{"A": {"value"}})
	for i := 1; i < len(enc); i++ {
		if _, err := valkey.DecodeHeader(enc[:i]); err == nil {
			t.Fatalf("DecodeHeader of %d of %d bytes: want a truncation error", i, len(enc))
		}
	}
}

func TestScriptsInProtocolDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatalf("read docs/protocol.md: %v", err)
	}
	for name, src := range valkey.Scripts() {
		if !bytes.Contains(doc, []byte(src)) {
			t.Errorf("docs/protocol.md does not contain %s verbatim", name)
		}
	}
}

// checkUnavailable runs every operation with a ctx of the given timeout and
// wants each to fail with ErrUnavailable within limit, never Claimed/true.
func checkUnavailable(t *testing.T, s *valkey.Store, timeout, limit time.Duration, wantCtxErr error) {
	t.Helper()
	id := store.Identity{Owner: "o", Scope: "r", Key: "down"}
	ops := map[string]func(ctx context.Context) (bool, error){
		"Claim": func(ctx context.Context) (bool, error) {
			res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute})
			return res.State == store.Claimed, err
		},
		"Complete": func(ctx context.Context) (bool, error) { return s.Complete(ctx, id, "t", store.Response{Status: 200}) },
		"Release":  func(ctx context.Context) (bool, error) { return s.Release(ctx, id, "t") },
		"Extend":   func(ctx context.Context) (bool, error) { return s.Extend(ctx, id, "t", time.Minute) },
		"Delete":   func(ctx context.Context) (bool, error) { return s.Delete(ctx, id) },
		"Get": func(ctx context.Context) (bool, error) {
			r, err := s.Get(ctx, id)
			return r != nil, err
		},
		"Ping": func(ctx context.Context) (bool, error) { return false, s.Ping(ctx) },
	}
	for name, op := range ops {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		ok, err := op(ctx)
		took := time.Since(start)
		cancel()
		if err == nil || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s: err = %v, want ErrUnavailable", name, err)
		}
		if wantCtxErr != nil && !errors.Is(err, wantCtxErr) {
			t.Fatalf("%s: err = %v, want it to wrap %v", name, err, wantCtxErr)
		}
		if ok {
			t.Fatalf("%s answered success with an error", name)
		}
		if took > limit {
			t.Fatalf("%s took %v, want under %v", name, took, limit)
		}
	}
}

func TestStoppedServer(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()})
	srv.Stop()
	checkUnavailable(t, s, 2*time.Second, 3*time.Second, nil)
}

func TestStalledServer(t *testing.T) {
	srv := valkeytest.Start(t)
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()})
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	peer := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: s.KeyPrefix()})
	srv.Pause()
	t.Cleanup(srv.Resume)
	checkUnavailable(t, s, 200*time.Millisecond, time.Second, context.DeadlineExceeded)
	defer func() {
		// Once the server answers again, so does the store, and its
		// subscription delivers notifications again.
		srv.Resume()
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("Ping after Resume: %v", err)
		}
		notificationsFlow(t, s, peer)
	}()

	// A manual cancel (no deadline) returns promptly too.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Claim(ctx, store.ClaimParams{Identity: store.Identity{Key: "cancel"}, Fingerprint: "fp", Token: "t", Lease: time.Minute})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with canceled ctx: err = %v, want ErrUnavailable and context.Canceled", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Claim with ctx canceled after 100ms took %v", took)
	}
}

func TestNewUnreachable(t *testing.T) {
	port := valkeytest.FreePort(t) // nothing listens there
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := valkey.New(ctx, valkey.Options{Addrs: []string{"127.0.0.1:" + strconv.Itoa(port)}})
	if err == nil {
		_ = s.Close()
		t.Fatal("New against a closed port: want an error")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("New: err = %v, want ErrUnavailable", err)
	}
}

// TestRestartResubscribes checks that after the server restarts, the store
// works again, waiting watchers are woken (spuriously: notifications may
// have been lost) and notifications from a peer reach new watchers.
func TestRestartResubscribes(t *testing.T) {
	srv := valkeytest.Start(t, valkeytest.WithAOF())
	opts := valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()}
	disrupted := make(chan struct{}, 1)
	sOpts := opts
	sOpts.OnDisruption = func() {
		select {
		case disrupted <- struct{}{}:
		default:
		}
	}
	s := newStore(t, sOpts)
	peer := newStore(t, opts)
	waiting, stop := s.Watch(store.Identity{Key: "waiting"})
	defer stop()
	srv.Restart()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher not woken after the server restarted")
	}
	// The store sent no command during the restart, yet it reports the
	// disruption: the proxy holds takeovers back on it.
	select {
	case <-disrupted:
	case <-time.After(10 * time.Second):
		t.Fatal("OnDisruption not called after the server restarted")
	}
	notificationsFlow(t, s, peer)
}

// notificationsFlow waits (up to 10s) until a Complete through peer wakes a
// watcher on s, i.e. s's subscription works again.
func notificationsFlow(t *testing.T, s, peer *valkey.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := store.Identity{Key: "after-restart-" + strconv.Itoa(i)}
		ch, stop := s.Watch(id)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := peer.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute})
		if err == nil && res.State == store.Claimed {
			_, err = peer.Complete(ctx, id, "t", store.Response{Status: 200})
		}
		cancel()
		woken := false
		if err == nil {
			select {
			case <-ch:
				woken = true
			case <-time.After(300 * time.Millisecond):
			}
		}
		stop()
		if woken {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no notification from a peer reached a watcher within 10s (last err %v)", err)
		}
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	srv := valkeytest.Start(b)
	storetest.BenchmarkClaimComplete(b, newStore(b, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()}))
}

func BenchmarkClaimCompleteLayout4(b *testing.B) {
	srv := valkeytest.Start(b)
	storetest.BenchmarkClaimComplete(b, newStore(b, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout4}))
}

func BenchmarkClaimCompleted(b *testing.B) {
	srv := valkeytest.Start(b)
	storetest.BenchmarkClaimCompleted(b, newStore(b, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()}))
}

// TestFailingServer: a server that answers with an error (here on a key
// that holds no record: a string of neither layout) is a store failure,
// never an answer, whichever layout the store writes.
func TestFailingServer(t *testing.T) {
	srv := valkeytest.Start(t)
	for _, layout := range []int{valkey.Layout3, valkey.Layout4} {
		t.Run("layout"+strconv.Itoa(layout), func(t *testing.T) { failingServer(t, srv, layout) })
	}
}

func failingServer(t *testing.T, srv *valkeytest.Server, layout int) {
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: layout})
	id := store.Identity{Key: "not-a-hash"}
	if _, err := srv.CLI("SET", s.Key(id), "garbage"); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute})
	if !errors.Is(err, store.ErrUnavailable) || res.State == store.Claimed {
		t.Fatalf("Claim on a string key = %+v, %v; want ErrUnavailable", res, err)
	}
	if ok, err := s.Complete(ctx, id, "t", store.Response{Status: 200}); ok || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete on a string key = %v, %v; want ErrUnavailable", ok, err)
	}
	if r, err := s.Get(ctx, id); r != nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get on a string key = %+v, %v; want ErrUnavailable", r, err)
	}
}

// TestFullValkeyFailsClosed: with maxmemory-policy noeviction and a full
// Valkey, every operation that may write fails with ErrUnavailable and
// changes nothing (a Claim of a completed record replays it, from a read). claim.lua used to DEL an abandoned record before writing
// the new one, and a script that has written once is no longer checked for
// memory, so another instance took over a claim whose holder could not
// extend it, and the operation ran twice.
func TestFullValkeyFailsClosed(t *testing.T) {
	for _, layout := range []int{valkey.Layout3, valkey.Layout4} {
		t.Run("layout"+strconv.Itoa(layout), func(t *testing.T) { fullValkeyFailsClosed(t, layout) })
	}
}

func fullValkeyFailsClosed(t *testing.T, layout int) {
	srv := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	opts := valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: layout}
	holder, other := newStore(t, opts), newStore(t, opts)
	opCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	const lease = 300 * time.Millisecond
	id := store.Identity{Owner: "o", Scope: "r", Key: "running"}
	held := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "holder", Lease: lease, Retention: time.Hour}
	res, err := holder.Claim(opCtx(), held)
	if err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	doneID := store.Identity{Owner: "o", Scope: "r", Key: "completed"}
	if res, err := holder.Claim(opCtx(), store.ClaimParams{Identity: doneID, Fingerprint: "fp", Token: "d", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if ok, err := holder.Complete(opCtx(), doneID, "d", store.Response{Status: 201, Body: []byte("done")}); !ok || err != nil {
		t.Fatalf("Complete: %v, %v", ok, err)
	}

	relID := store.Identity{Owner: "o", Scope: "r", Key: "released"}
	if res, err := holder.Claim(opCtx(), store.ClaimParams{Identity: relID, Fingerprint: "fp", Token: "rel", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}

	free := srv.Fill(t)
	defer free()
	time.Sleep(time.Until(res.LeaseEnd) + 50*time.Millisecond) // let the lease end

	refused := func(op string, acted bool, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrUnavailable) || acted {
			t.Errorf("%s on a full Valkey: acted=%v err=%v; want ErrUnavailable and no effect", op, acted, err)
		} else if !strings.Contains(err.Error(), "OOM") {
			t.Errorf("%s on a full Valkey: err = %v, want the server's OOM refusal", op, err)
		}
	}
	claim := func(s *valkey.Store, p store.ClaimParams) (bool, error) {
		res, err := s.Claim(opCtx(), p)
		if err == nil {
			t.Logf("Claim(%s, token %s) answered %+v", p.Identity.Key, p.Token, res)
		}
		return res.State == store.Claimed, err
	}
	takeover := held
	takeover.Token = "taker"
	ok, err := claim(other, takeover)
	refused("another instance's takeover Claim", ok, err)
	ok, err = claim(holder, held)
	refused("the holder's repeated Claim", ok, err)
	fresh := store.ClaimParams{Identity: store.Identity{Owner: "o", Scope: "r", Key: "fresh"}, Fingerprint: "fp", Token: "f", Lease: time.Minute, Retention: time.Hour}
	ok, err = claim(other, fresh)
	refused("a Claim of a free identity", ok, err)
	// claim.lua may write, so the server refuses it whatever it would have
	// answered; a completed record needs no write, and Claim answers it
	// from a read (TestFullValkeyReplaysCompleted).
	if res, err := other.Claim(opCtx(), store.ClaimParams{Identity: doneID, Fingerprint: "fp", Token: "r", Lease: time.Minute, Retention: time.Hour}); err != nil ||
		res.State != store.Completed || string(res.Response.Body) != "done" {
		t.Errorf("a Claim of a completed identity on a full Valkey = %+v, %v; want its replay", res, err)
	}
	ok, err = holder.Complete(opCtx(), id, "holder", store.Response{Status: 201, Body: []byte("late")})
	refused("the holder's Complete", ok, err)

	// get.lua declares no-writes: reads still answer on a full Valkey.
	if r, err := other.Get(opCtx(), id); err != nil || r == nil || r.Token != "holder" || r.State != store.Abandoned {
		t.Fatalf("Get on the full Valkey = %+v, %v; want the abandoned record still held by the holder's token", r, err)
	}
	// extend.lua, release.lua and delete.lua declare allow-oom: they only
	// rewrite or free memory. The holder's heartbeat keeps its claim alive
	// on a full Valkey, so when memory frees nobody takes it over
	// (adversarial finding F4: another instance that saw no failure did),
	// and an operator can purge records to free memory.
	if ok, err := holder.Extend(opCtx(), id, "holder", time.Minute); !ok || err != nil {
		t.Fatalf("the holder's Extend on a full Valkey = %v, %v; want it to keep the lease", ok, err)
	}
	if ok, err := holder.Release(opCtx(), relID, "rel"); !ok || err != nil {
		t.Fatalf("Release on a full Valkey = %v, %v; want the record freed", ok, err)
	}
	if ok, err := other.Delete(opCtx(), doneID); !ok || err != nil {
		t.Fatalf("Delete on a full Valkey = %v, %v; want the record purged", ok, err)
	}
	free()
	if r, err := other.Get(opCtx(), id); err != nil || r == nil || r.Token != "holder" || r.State != store.Running {
		t.Fatalf("Get after freeing memory = %+v, %v; want the record running, held by the holder", r, err)
	}
	if res, err := other.Claim(opCtx(), takeover); err != nil || res.State != store.Running {
		t.Fatalf("another instance's Claim after freeing memory = %+v, %v; want Running (no takeover)", res, err)
	}
	if r, err := other.Get(opCtx(), fresh.Identity); r != nil || err != nil {
		t.Fatalf("Get of the identity claimed while full = %+v, %v; want nil", r, err)
	}
	// With memory back, the holder records its response and it replays.
	if ok, err := holder.Complete(opCtx(), id, "holder", store.Response{Status: 201, Body: []byte("once")}); !ok || err != nil {
		t.Fatalf("the holder's Complete after freeing memory: %v, %v", ok, err)
	}
	if res, err := other.Claim(opCtx(), takeover); err != nil || res.State != store.Completed || string(res.Response.Body) != "once" {
		t.Fatalf("Claim after the holder completed: %+v, %v; want its response", res, err)
	}
}

// TestClaimOverwritesOldRecord: claim.lua writes a new record over an
// expired or abandoned one instead of deleting it first (see
// TestFullValkeyFailsClosed); no field of the old record may survive.
func TestClaimOverwritesOldRecord(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix()})
	ctx := t.Context()
	runningFields := []string{"c", "f", "fr", "k", "l", "o", "r", "rt", "s", "t", "tk", "v", "x"}
	fieldsOf := func(key string) map[string]string {
		t.Helper()
		m, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	check := func(what string, key, token string) {
		t.Helper()
		m := fieldsOf(key)
		names := make([]string, 0, len(m))
		for f := range m {
			names = append(names, f)
		}
		slices.Sort(names)
		if !slices.Equal(names, runningFields) || m["t"] != token || m["s"] != "running" {
			t.Fatalf("%s: fields %q, want exactly %q of a running record held by %q", what, m, runningFields, token)
		}
	}

	// A completed record past its end (x <= now) whose key has not expired
	// yet (the exact end == now case of the server's own expiry).
	id := store.Identity{Owner: "o", Scope: "r", Key: "expired"}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "a", Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Complete(ctx, id, "a", store.Response{Status: 201, Header: http.Header{"A": {"1"}}, Body: []byte("old")}); !ok || err != nil {
		t.Fatalf("Complete: %v %v", ok, err)
	}
	if err := c.Do(ctx, c.B().Hset().Key(s.Key(id)).FieldValue().FieldValue("x", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp2", Token: "b", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed || res.Takeover {
		t.Fatalf("Claim over the expired record: %+v, %v; want a fresh claim", res, err)
	}
	check("fresh claim over an expired completed record", s.Key(id), "b")

	// An abandoned running record, taken over.
	id = store.Identity{Owner: "o", Scope: "r", Key: "abandoned"}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "a", Lease: 20 * time.Millisecond, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(res.LeaseEnd) + 10*time.Millisecond)
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "b", Lease: time.Minute}); err != nil || !res.Takeover {
		t.Fatalf("takeover Claim: %+v, %v", res, err)
	}
	check("takeover", s.Key(id), "b")
	if m := fieldsOf(s.Key(id)); m["rt"] != "0" {
		t.Fatalf("takeover kept the old retention: rt = %q, want 0", m["rt"])
	}
}
