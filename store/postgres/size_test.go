package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestSizePerCompletedRow writes completed records for the bench's response
// through the store (the claim statement, then the complete statement, as
// the proxy does) into a fresh table and reports
// pg_total_relation_size(table) / rows (heap, TOAST, primary key and expiry
// index) right after the writes; after a VACUUM, which makes the space of
// the running rows that the completes replaced reusable for later records
// (it does not shrink the files); and after a VACUUM FULL, which rewrites
// the table and its indexes with the live rows only (the floor a table
// under steady churn never quite reaches).
func TestSizePerCompletedRow(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable(), SweepInterval: -1})
	n := storetest.SizeRecords(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	const workers = 16
	if err := storetest.FillCompleted(ctx, s, n, workers); err != nil {
		t.Fatal(err)
	}
	size := func() (total, heap, toast int64) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), pg_relation_size($1::regclass),
  COALESCE((SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = $1::regclass AND reltoastrelid <> 0), 0)`,
			s.table).Scan(&total, &heap, &toast); err != nil {
			t.Fatalf("relation sizes: %v", err)
		}
		return total, heap, toast
	}
	written, _, _ := size()
	if _, err := s.pool.Exec(ctx, `VACUUM `+s.table); err != nil {
		t.Fatalf("VACUUM: %v", err)
	}
	vacuumed, heap, toast := size()
	if _, err := s.pool.Exec(ctx, `VACUUM FULL `+s.table); err != nil {
		t.Fatalf("VACUUM FULL: %v", err)
	}
	full, fullHeap, _ := size()
	var rowBytes int64
	p, resp := storetest.BenchRecord(n / 2)
	if err := s.pool.QueryRow(ctx, `SELECT pg_column_size(r.*) FROM `+s.table+` r WHERE id = $1`, ID(p.Identity)).Scan(&rowBytes); err != nil {
		t.Fatalf("row size: %v", err)
	}
	per := func(b int64) float64 { return float64(b) / float64(n) }
	t.Logf("%d completed rows, body %d bytes: pg_total_relation_size per row %.0f bytes after the writes, %.0f after VACUUM (heap %.0f, TOAST %d bytes in all), %.0f after VACUUM FULL (heap %.0f); one row %d bytes",
		n, len(resp.Body), per(written), per(vacuumed), per(heap), toast, per(full), per(fullHeap), rowBytes)
	// A row of layout 2 took 618 bytes here, 896 to 901 bytes of table per
	// row after the writes (docs/performance.md). The row size is exact;
	// the table figures move with how the concurrent updates fall on
	// pages. The target of half (docs/performance.md, "bolt and Postgres")
	// is out of reach for a row whose identity,
	// fingerprint, recipe and headers alone outweigh the compressed body
	// (docs/performance.md says why). The bench's 227-byte body is stored
	// as it is (under layout.MinCompressBytes: its zstd frame saved 74
	// bytes a row for 3-4 µs of CPU on every fresh request), so the row
	// is 627 bytes where its frame made 556; the bound keeps that.
	if rowBytes > 640 {
		t.Errorf("one completed row = %d bytes, want at most 640 (the body stored uncompressed, 627 measured)", rowBytes)
	}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: p.Identity, Fingerprint: p.Fingerprint, Token: "other", Lease: time.Minute})
	if err != nil || res.State != store.Completed || string(res.Response.Body) != string(resp.Body) {
		t.Fatalf("replay of record %d: %+v, %v", n/2, res, err)
	}
}
