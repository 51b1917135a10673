package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
	"github.com/idemgate/idemgate/store/storetest"
)

func newTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(filepath.Join(t.TempDir(), "idemgate.db"), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestDoneContextWhileWriteLockHeld checks that a caller whose context ends
// while another transaction holds the write lock gets its error promptly,
// and that the abandoned operation never happens later.
func TestDoneContextWhileWriteLockHeld(t *testing.T) {
	s := newTestStore(t)
	id := store.Identity{Owner: "o", Scope: "r", Key: "k"}
	tx, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute})
	elapsed := time.Since(start)
	if err == nil || !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || res.State == store.Claimed {
		t.Fatalf("Claim behind a held write lock = %+v %v, want an error wrapping ErrUnavailable and DeadlineExceeded", res, err)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("Claim took %v to give up on a 50ms deadline", elapsed)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The abandoned transaction now gets the lock and must roll back: a
	// later write serializes after it, and the record must still be absent.
	if _, err := s.Delete(t.Context(), store.Identity{Key: "other"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(t.Context(), id); err != nil || r != nil {
		t.Fatalf("record after the abandoned Claim = %+v %v, want absent", r, err)
	}
}

func TestCorruptRecordIsAnError(t *testing.T) {
	s := newTestStore(t)
	id := store.Identity{Owner: "o", Scope: "r", Key: "k"}
	ctx := t.Context()
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(v []byte) []byte{
		"future version": func(v []byte) []byte { v[0] = FormatVersion + 1; return v },
		"unknown state":  func(v []byte) []byte { v[1] = 9; return v },
		"unknown flag":   func(v []byte) []byte { v[2] |= 0x80; return v },
		"truncated":      func(v []byte) []byte { return v[:len(v)-1] },
		"trailing bytes": func(v []byte) []byte { return append(v, 0) },
		"short":          func(v []byte) []byte { return v[:10] },
	} {
		t.Run(name, func(t *testing.T) {
			var saved []byte
			err := s.db.Update(func(tx *bbolt.Tx) error {
				b := tx.Bucket(bucketRecords)
				saved = bytes.Clone(b.Get(RecordKey(id)))
				return b.Put(RecordKey(id), mutate(bytes.Clone(saved)))
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketRecords).Put(RecordKey(id), saved) })
			})
			res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t2", Lease: time.Minute})
			if !errors.Is(err, store.ErrUnavailable) || res.State == store.Claimed {
				t.Fatalf("Claim on a corrupt record = %+v %v, want an error wrapping ErrUnavailable", res, err)
			}
			if r, err := s.Get(ctx, id); !errors.Is(err, store.ErrUnavailable) || r != nil {
				t.Fatalf("Get on a corrupt record = %+v %v, want an error", r, err)
			}
			if ok, err := s.Delete(ctx, id); !errors.Is(err, store.ErrUnavailable) || ok {
				t.Fatalf("Delete on a corrupt record = %v %v, want an error", ok, err)
			}
		})
	}
}

func TestFormatVersionMismatchRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.db")
	s, err := New(path, WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyVersion, []byte{FormatVersion + 1}) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := New(path)
	if err == nil {
		_ = s2.Close()
		t.Fatal("New on a file of another format version succeeded")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("New: %v, want an error wrapping ErrUnavailable", err)
	}
}

func TestRecordEncodingRoundTrip(t *testing.T) {
	for name, r := range map[string]*record{
		"running": {
			ID: store.Identity{Owner: "\x00", Scope: "", Key: "k\xff"}, Running: true, Takeover: true,
			Fingerprint: "fp", Recipe: "b=raw&q=1&v=hs1", Token: "tok", CreatedMs: 1, LeaseEndMs: 2, ExpiryMs: 3, RetentionMs: 4,
		},
		"gone": {
			ID: store.Identity{Owner: "o", Scope: "s", Key: "k"}, Gone: true, CreatedMs: 1, ExpiryMs: 3, RetentionMs: 2,
		},
		"completed, nil header and body": {
			ID: store.Identity{Owner: "o"}, Fingerprint: "fp", CreatedMs: 1, RetentionMs: 0, StoredAtMs: 5,
			Resp: &store.Response{Status: 599, Omitted: true, StoredAt: rules.Time(5)},
		},
		"completed, empty header and body": {
			ID: store.Identity{Owner: "o"}, Fingerprint: "fp", StoredAtMs: 5,
			Resp: &store.Response{Status: 200, Header: http.Header{}, Body: []byte{}, StoredAt: rules.Time(5)},
		},
		"completed, full": {
			ID: store.Identity{Owner: "o"}, Fingerprint: "fp", ExpiryMs: 99, StoredAtMs: 7,
			Resp: &store.Response{
				Status: 201,
				Header: http.Header{"Set-Cookie": {"a=1", "b=2"}, "x-raw": {"", ""}, "X-None": {}},
				Body:   []byte("\x00\xff"), StoredAt: rules.Time(7), Trailer: http.Header{"Grpc-Status": {"0"}},
			},
		},
		"completed, compressed body, packed fingerprint": {
			ID: store.Identity{Owner: "o", Scope: "s", Key: "k"}, Fingerprint: "hs1:" + strings.Repeat("0123456789abcdef", 4),
			Recipe: "b=raw&q=1&v=hs1", CreatedMs: 1_700_000_000_000, ExpiryMs: 1_700_086_400_000, RetentionMs: 86_400_000, StoredAtMs: 1_700_000_000_050,
			Resp: &store.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}},
				Body: storetest.BenchBody, StoredAt: rules.Time(1_700_000_000_050)},
		},
		"fingerprint hs1 in upper case, kept as it is": {
			ID: store.Identity{Owner: "o"}, Running: true, Fingerprint: "hs1:" + strings.Repeat("0123456789ABCDEF", 4), Token: "t", LeaseEndMs: -5,
		},
		"already encoded body, kept as it is": {
			ID: store.Identity{Owner: "o"}, Fingerprint: "fp", StoredAtMs: 5,
			Resp: &store.Response{Status: 200, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: storetest.BenchBody, StoredAt: rules.Time(5)},
		},
	} {
		t.Run(name, func(t *testing.T) {
			codec, err := layout.NewBodyCodec()
			if err != nil {
				t.Fatal(err)
			}
			v, err := encodeRecord(r, codec)
			if err != nil {
				t.Fatal(err)
			}
			if v[0] != FormatVersion {
				t.Fatalf("version byte = %d", v[0])
			}
			if r.Resp != nil && r.Resp.Body != nil {
				_, wantZ := codec.Compress(r.Resp.Header, r.Resp.Body)
				if z := v[2]&flagBodyZstd != 0; z != wantZ {
					t.Fatalf("body compressed = %v, want %v (%d-byte value)", z, wantZ, len(v))
				}
			}
			if _, packed := packFingerprint(r.Fingerprint); packed != (v[2]&flagFingerprintPacked != 0) {
				t.Fatalf("fingerprint packed = %v, want %v", !packed, packed)
			}
			got, err := decodeRecord(v, codec)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("round trip:\n got %+v %+v\nwant %+v %+v", got, got.Resp, r, r.Resp)
			}
		})
	}
}

// TestSweepSpansBatches checks that Sweep removes more expired records than
// one transaction's batch, and leaves live ones alone.
func TestSweepSpansBatches(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(filepath.Join(t.TempDir(), "idemgate.db"), WithSweepInterval(0), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const expired, live = 2*sweepBatch + 500, 10
	nowMs := now.UnixMilli()
	// One transaction writes them all; a Claim each would fsync 2500 times.
	err = s.db.Update(func(tx *bbolt.Tx) error {
		for i := range expired + live {
			id := store.Identity{Key: string(rune('a'+i%26)) + time.Duration(i).String()}
			w, _, err := begin(tx, id, nowMs, s.codec)
			if err != nil {
				return err
			}
			end := nowMs - 1 // expired
			if i >= expired {
				end = nowMs + 1
			}
			if err := w.put(&record{ID: id, Running: true, Token: "t", CreatedMs: nowMs - 10, LeaseEndMs: end, ExpiryMs: end}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Sweep(t.Context())
	if err != nil || got != expired {
		t.Fatalf("Sweep removed %d (%v), want %d", got, err, expired)
	}
	if n, err := s.Len(t.Context()); err != nil || n != live {
		t.Fatalf("Len after Sweep = %d (%v), want %d", n, err, live)
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if n := tx.Bucket(bucketExpiry).Stats().KeyN; n != live {
			t.Errorf("expiry entries after Sweep = %d, want %d", n, live)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadsFormatVersion1 builds a file and a record exactly as a build
// before recipes wrote them (format version 1, docs/protocol.md) and checks
// that this build opens the file, marks it version 2, and replays the
// record with no recipe.
func TestReadsFormatVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.db")
	id := store.Identity{Owner: "h:alice", Scope: "orders", Key: "k1"}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v []byte
	v = append(v, 1, stateCompleted, flagHeaderSet|flagBodySet)
	now := time.Now().UnixMilli()
	for _, n := range []int64{now - 1000, 0, 0, 0, now - 500} { // created, lease end, expiry (never), retention, stored at
		v = binary.BigEndian.AppendUint64(v, uint64(n))
	}
	v = binary.BigEndian.AppendUint16(v, 201)
	header := layout.BoltV2Header.Encode(http.Header{"Location": {"/v1/orders/1"}})
	for _, f := range [][]byte{[]byte(id.Owner), []byte(id.Scope), []byte(id.Key), []byte("hs1:fp"), nil, header, []byte(`{"id":1}`)} {
		v = binary.BigEndian.AppendUint32(v, uint32(len(f)))
		v = append(v, f...)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyVersion, []byte{1}); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketExpiry); err != nil {
			return err
		}
		recs, err := tx.CreateBucket(bucketRecords)
		if err != nil {
			return err
		}
		return recs.Put(RecordKey(id), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := New(path, WithSweepInterval(0))
	if err != nil {
		t.Fatalf("opening a version 1 file: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "hs1:fp", Recipe: "b=raw&q=1&v=hs1", Token: "t", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != store.Completed || res.Recipe != "" || res.Fingerprint != "hs1:fp" || res.Response == nil ||
		res.Response.Status != 201 || string(res.Response.Body) != `{"id":1}` || res.Response.Header.Get("Location") != "/v1/orders/1" {
		t.Fatalf("Claim on a version 1 record = %+v (%+v)", res, res.Response)
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if got := tx.Bucket(bucketMeta).Get(keyVersion); !bytes.Equal(got, []byte{FormatVersion}) {
			t.Errorf("meta version after open = %v, want %d", got, FormatVersion)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSweepPrunesIndex checks that the sweep removes the index entries of
// expired records (and their index-expiry entries), and that a gone record
// is stored with state byte 3 and no response.
func TestSweepPrunesIndex(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(filepath.Join(t.TempDir(), "idemgate.db"), WithSweepInterval(0), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	count := func(name []byte) int {
		n := 0
		if err := s.db.View(func(tx *bbolt.Tx) error { n = tx.Bucket(name).Stats().KeyN; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ids := []store.Identity{{Owner: "o", Scope: "s", Key: "short"}, {Owner: "o", Scope: "s", Key: "forever"}}
	for i, id := range ids {
		retention := time.Minute
		if i == 1 {
			retention = 0
		}
		p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "tok" + id.Key, Lease: time.Second, Retention: retention}
		if _, err := s.Claim(ctx, p); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Complete(ctx, id, p.Token, store.Response{Status: 201}); err != nil || !ok {
			t.Fatalf("Complete = %v, %v", ok, err)
		}
		if err := s.Index(ctx, "/a", id); err != nil {
			t.Fatal(err)
		}
		if err := s.Index(ctx, "/b", id); err != nil {
			t.Fatal(err)
		}
	}
	if got := count(bucketIndex); got != 4 {
		t.Fatalf("index entries = %d, want 4", got)
	}
	if got := count(bucketIndexExpiry); got != 2 {
		t.Fatalf("index-expiry entries = %d, want 2 (retention 0 never expires)", got)
	}
	if n, err := s.Tombstone(ctx, store.Resource{Owner: "o", Scope: "s", Path: "/b"}); err != nil || n != 2 {
		t.Fatalf("Tombstone = %d, %v, want 2", n, err)
	}
	if err := s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get(RecordKey(ids[0]))
		r, err := decodeRecord(v, s.codec)
		if err != nil || v[0] != FormatVersion || v[1] != stateGone || v[2] != 0 || r.Resp != nil || r.Fingerprint != "" || r.Recipe != "" {
			t.Fatalf("gone record %x = %+v, %v", v, r, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, got2 := count(bucketIndex), count(bucketIndexExpiry); got != 2 || got2 != 1 {
		t.Fatalf("after Tombstone: index entries %d, index-expiry entries %d, want 2 and 1", got, got2)
	}
	now = now.Add(time.Minute)
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v, want 1", n, err)
	}
	if got, got2 := count(bucketIndex), count(bucketIndexExpiry); got != 1 || got2 != 0 {
		t.Fatalf("after Sweep: index entries %d, index-expiry entries %d, want 1 and 0", got, got2)
	}
}

// TestReadsFormatVersion2 builds a file exactly as builds before format
// version 3 left it (meta version 2, records in format version 2 with their
// expiry entries) and opens it with this build: the completed record
// replays byte for byte, the running one completes (and is then stored in
// version 3), the expired one is swept by its version 2 expiry, and the
// file is marked 3 so that the earlier build refuses it.
func TestReadsFormatVersion2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.db")
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	nowMs := now.UnixMilli()
	p, resp := storetest.BenchRecord(1)
	resp.Trailer = http.Header{"Grpc-Status": {"0"}}
	completed := &record{ID: p.Identity, Fingerprint: p.Fingerprint, Recipe: p.Recipe, CreatedMs: nowMs - 2000,
		ExpiryMs: nowMs + 3_600_000, RetentionMs: 3_600_000, StoredAtMs: nowMs - 1000, Resp: &resp}
	runningID := store.Identity{Owner: "o", Scope: "default", Key: "running"}
	running := &record{ID: runningID, Running: true, Fingerprint: "hs1:fp", Recipe: p.Recipe, Token: "tok", CreatedMs: nowMs - 10,
		LeaseEndMs: nowMs + 60_000, ExpiryMs: nowMs + 3_600_000, RetentionMs: 3_600_000}
	expiredID := store.Identity{Owner: "o", Scope: "default", Key: "expired"}
	expired := &record{ID: expiredID, Fingerprint: "hs1:fp", CreatedMs: nowMs - 5000, ExpiryMs: nowMs - 1, RetentionMs: 1000,
		StoredAtMs: nowMs - 4000, Resp: &store.Response{Status: 200, Body: []byte("old")}}

	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyVersion, []byte{2}); err != nil {
			return err
		}
		for _, name := range [][]byte{bucketIndex, bucketIndexExpiry} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		exp, err := tx.CreateBucket(bucketExpiry)
		if err != nil {
			return err
		}
		recs, err := tx.CreateBucket(bucketRecords)
		if err != nil {
			return err
		}
		for _, r := range []*record{completed, running, expired} {
			v, err := encodeRecordV2(r)
			if err != nil {
				return err
			}
			if v[0] != 2 {
				t.Fatalf("encodeRecordV2 wrote version %d", v[0])
			}
			if err := recs.Put(RecordKey(r.ID), v); err != nil {
				return err
			}
			if err := exp.Put(expiryKey(r.ExpiryMs, RecordKey(r.ID)), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := New(path, WithSweepInterval(0), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatalf("opening a version 2 file: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	res, err := s.Claim(ctx, store.ClaimParams{Identity: p.Identity, Fingerprint: p.Fingerprint, Token: "t", Lease: time.Minute})
	if err != nil || res.State != store.Completed || res.Fingerprint != p.Fingerprint || res.Recipe != p.Recipe || res.Response == nil {
		t.Fatalf("Claim on a version 2 record = %+v, %v", res, err)
	}
	want := resp
	want.StoredAt = rules.Time(nowMs - 1000)
	if !reflect.DeepEqual(*res.Response, want) {
		t.Fatalf("replay of a version 2 record:\n got %+v\nwant %+v", *res.Response, want)
	}
	if ok, err := s.Complete(ctx, runningID, "tok", resp); !ok || err != nil {
		t.Fatalf("Complete of a version 2 running record = %v, %v", ok, err)
	}
	if r, err := s.Get(ctx, runningID); err != nil || r == nil || r.State != store.Completed || string(r.Response.Body) != string(resp.Body) {
		t.Fatalf("Get after Complete = %+v, %v", r, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the expired version 2 record removed", n, err)
	}
	if n, err := s.Len(ctx); err != nil || n != 2 {
		t.Fatalf("Len after Sweep = %d, %v, want 2", n, err)
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if got := tx.Bucket(bucketMeta).Get(keyVersion); !bytes.Equal(got, []byte{FormatVersion}) {
			t.Errorf("meta version after open = %v, want %d", got, FormatVersion)
		}
		// Written in the current format, its body compressed only from
		// layout.MinCompressBytes on (the bench record's is under it).
		wantZstd := len(resp.Body) >= layout.MinCompressBytes
		if v := tx.Bucket(bucketRecords).Get(RecordKey(runningID)); len(v) == 0 || v[0] != FormatVersion || (v[2]&flagBodyZstd != 0) != wantZstd {
			t.Errorf("record completed after the upgrade = %x, want version %d, body compressed %v", v, FormatVersion, wantZstd)
		}
		if n := tx.Bucket(bucketExpiry).Stats().KeyN; n != 2 {
			t.Errorf("expiry entries = %d, want 2", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
