package bolt

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestFileSizePerCompletedRecord writes completed records for the bench's
// response through the store (Claim then Complete, one write transaction
// each, as the proxy does) into a fresh file and reports, per record, the
// file's high-water mark (bbolt's tx.Size: pages ever allocated, pages
// freed by copy-on-write included since they are reused, not returned)
// and the file size on disk (the high-water mark rounded up to bbolt's
// 16 MiB growth step). fsync is off for the writes: it changes no byte of
// the file and would make 200,000 transactions take minutes.
func TestFileSizePerCompletedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.db")
	s, err := New(path, WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.db.NoSync = true
	n := storetest.SizeRecords(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	hwm := func() int64 {
		var size int64
		if err := s.db.View(func(tx *bbolt.Tx) error { size = tx.Size(); return nil }); err != nil {
			t.Fatal(err)
		}
		return size
	}
	fileSize := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	hwm0, file0 := hwm(), fileSize()
	for i := range n {
		p, resp := storetest.BenchRecord(i)
		if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim %d: %+v, %v", i, res, err)
		}
		if ok, err := s.Complete(ctx, p.Identity, p.Token, resp); !ok || err != nil {
			t.Fatalf("Complete %d: %v, %v", i, ok, err)
		}
	}
	s.db.NoSync = false
	var value int
	p, resp := storetest.BenchRecord(n / 2)
	if err := s.db.View(func(tx *bbolt.Tx) error {
		value = len(tx.Bucket(bucketRecords).Get(RecordKey(p.Identity)))
		for _, name := range [][]byte{bucketRecords, bucketExpiry} {
			st := tx.Bucket(name).Stats()
			t.Logf("bucket %s: %d keys, leaf pages %d bytes (%d in use), branch pages %d bytes, per record %.0f bytes",
				name, st.KeyN, st.LeafAlloc, st.LeafInuse, st.BranchAlloc, float64(st.LeafAlloc+st.BranchAlloc)/float64(n))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stats := s.db.Stats()
	perHWM := float64(hwm()-hwm0) / float64(n)
	perFile := float64(fileSize()-file0) / float64(n)
	t.Logf("%d completed records, body %d bytes: high-water mark %.0f bytes per record, file size %.0f bytes per record, one record value %d bytes, %d free pages",
		n, len(resp.Body), perHWM, perFile, value, stats.FreePageN)
	// Format version 2 took 1,083 bytes per record here (high-water mark,
	// 100,000 records; docs/performance.md). The target is at most
	// half, which bbolt's per-entry overhead and half-full B-tree pages
	// keep out of reach (docs/performance.md says why); this bound keeps
	// what version 3 won from being lost again. The bench's 227-byte body
	// is stored as it is (under layout.MinCompressBytes: its zstd frame
	// saved 96 of its bytes for 3-4 µs of CPU on every fresh request), 922 bytes
	// measured where the frame made 788.
	if perHWM > 940 {
		t.Errorf("high-water mark per completed record = %.0f bytes, want at most 940 (87 %% of version 2's 1,083, the body stored uncompressed)", perHWM)
	}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: p.Identity, Fingerprint: p.Fingerprint, Token: "other", Lease: time.Minute})
	if err != nil || res.State != store.Completed || string(res.Response.Body) != string(resp.Body) {
		t.Fatalf("replay of record %d: %+v, %v", n/2, res, err)
	}
}
