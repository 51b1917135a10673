package postgres

import (
	"testing"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/storetest"
)

// BenchmarkClaimComplete: claim and complete of a new key on a local
// PostgreSQL (fsync on, as in production).
func BenchmarkClaimComplete(b *testing.B) {
	srv := pgtest.Start(b, pgtest.WithFsync())
	s, err := New(b.Context(), Options{DSN: srv.DSN(), Table: freshTable()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	storetest.BenchmarkClaimComplete(b, s)
}

// BenchmarkClaimCompleted: claim of a completed key (a replay).
func BenchmarkClaimCompleted(b *testing.B) {
	srv := pgtest.Start(b)
	s, err := New(b.Context(), Options{DSN: srv.DSN(), Table: freshTable()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	storetest.BenchmarkClaimCompleted(b, s)
}
