package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// storeSnap is a store's counters at one moment: operations by name, the
// operations that were client round trips, and the store's CPU seconds.
type storeSnap struct {
	byName map[string]int64
	trips  int64
	cpu    float64
}

// delta returns after-before: every operation, the round trips, the CPU
// seconds and the operations by name (those that changed).
func (after storeSnap) delta(before storeSnap) (all, trips int64, cpu float64, byName map[string]int64) {
	byName = map[string]int64{}
	for name, n := range after.byName {
		if d := n - before.byName[name]; d > 0 {
			byName[name] = d
			all += d
		}
	}
	return all, after.trips - before.trips, after.cpu - before.cpu, byName
}

// storeMeter reads the counters of the store behind target D or E.
type storeMeter interface {
	snap() (storeSnap, error)
	// opsName names the operations in the report ("Valkey commands").
	opsName() string
}

// valkeyMeter reads INFO commandstats and the CPU of valkey-server.
type valkeyMeter struct{ p *proc }

func (m valkeyMeter) opsName() string { return "Valkey commands" }

func (m valkeyMeter) snap() (storeSnap, error) {
	st, err := readCmdStats(m.p.addr)
	if err != nil {
		return storeSnap{}, err
	}
	s := storeSnap{byName: map[string]int64{}}
	for name, n := range st {
		if name == "info" { // the benchmark's own
			continue
		}
		s.byName[name] = n
		if clientCommands[name] {
			s.trips += n
		}
	}
	s.trips += clientSets(s.byName)
	s.cpu, _ = cpuSeconds(m.p.pid())
	return s, nil
}

// pgMeter counts the statements PostgreSQL executed for idemgate through
// pg_stat_statements (updated as each statement ends, unlike
// pg_stat_database, whose counters a backend flushes up to 10 s later),
// and reads the CPU of the postmaster and all its children from /proc.
//
// Every statement idemgate sends is one round trip: pgx sends Bind,
// Execute and Sync of a prepared statement in one write, and each store
// operation is one statement. Not counted: the Parse a connection sends
// once per statement when it first uses it (a warm-up cost of the pool),
// pings, the LISTEN of the listening connection, and this meter's own
// queries.
type pgMeter struct {
	srv  *pgtest.Server
	conn *pgx.Conn // the meter's own connection
}

func (m *pgMeter) opsName() string { return "PostgreSQL statements" }

// pgStatementNames names idemgate's statements (store/postgres/ops.go) by
// fragments only that statement holds; the first match wins. No fragment
// holds a constant: pg_stat_statements shows constants as $n.
var pgStatementNames = []struct {
	name      string
	fragments []string
}{
	{"claim", []string{"INSERT INTO"}},
	{"sweep", []string{"ctid"}},
	{"complete", []string{"stored_at = n.now"}},
	{"release", []string{"DELETE FROM", "r.token"}},
	{"delete", []string{"DELETE FROM"}},
	{"extend", []string{"SET lease_end"}},
	{"get", []string{"SELECT n.now, r.owner"}},
}

func pgStatementName(query string) string {
next:
	for _, s := range pgStatementNames {
		for _, f := range s.fragments {
			if !strings.Contains(query, f) {
				continue next
			}
		}
		return s.name
	}
	f := strings.Fields(query)
	if len(f) == 0 {
		return "other"
	}
	return strings.ToLower(f[0])
}

func (m *pgMeter) snap() (storeSnap, error) {
	ctx := context.Background()
	rows, err := m.conn.Query(ctx, `SELECT query, calls FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE 'LISTEN %'`)
	if err != nil {
		return storeSnap{}, fmt.Errorf("pg_stat_statements: %w", err)
	}
	s := storeSnap{byName: map[string]int64{}}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			rows.Close()
			return storeSnap{}, err
		}
		s.byName[pgStatementName(q)] += n
		s.trips += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return storeSnap{}, fmt.Errorf("pg_stat_statements: %w", err)
	}
	s.cpu = pgCPUSeconds(m.srv.PIDs())
	return s, nil
}

// pgCPUSeconds returns the CPU time of PostgreSQL: user+system of the
// postmaster (pids[0]) and every child alive now, plus the postmaster's
// cutime+cstime, which holds the CPU of the children it has reaped.
func pgCPUSeconds(pids []int) float64 {
	var sum float64
	for i, pid := range pids {
		t, err := cpuSeconds(pid)
		if err != nil {
			continue // exited meanwhile; its CPU moves to the postmaster's cutime
		}
		sum += t
		if i == 0 {
			c, _ := childCPUSeconds(pid)
			sum += c
		}
	}
	return sum
}

// startPostgres starts target E's PostgreSQL through pgtest (127.0.0.1,
// a fresh directory, as the postgres user when run as root) with
// pg_stat_statements loaded, and returns its meter and a stop func.
// durable keeps PostgreSQL's defaults (fsync, synchronous_commit,
// full_page_writes on); otherwise they are off.
func startPostgres(ctx context.Context, durable bool) (*pgMeter, func(), error) {
	opts := []pgtest.Option{
		pgtest.WithSetting("shared_preload_libraries", "pg_stat_statements"),
		pgtest.WithSetting("pg_stat_statements.track", "top"),
	}
	if durable {
		opts = append(opts, pgtest.WithFsync())
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	srv, stop, err := pgtest.Launch(logf, opts...)
	if err != nil {
		return nil, nil, err
	}
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	}
	if err != nil {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
		stop()
		return nil, nil, fmt.Errorf("postgres: pg_stat_statements: %w", err)
	}
	m := &pgMeter{srv: srv, conn: conn}
	return m, func() {
		_ = conn.Close(context.Background())
		stop()
	}, nil
}

// pgVersion returns the server's version string.
func (m *pgMeter) version() string {
	var v string
	if err := m.conn.QueryRow(context.Background(), "SELECT version()").Scan(&v); err != nil {
		return "PostgreSQL version unknown"
	}
	if i := strings.Index(v, " on "); i > 0 {
		v = v[:i]
	}
	return v
}
