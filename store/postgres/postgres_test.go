package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/storetest"
)

var tableSeq atomic.Int64

func freshTable() string {
	return fmt.Sprintf("records_%d_%d", time.Now().UnixNano()%1e6, tableSeq.Add(1))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open returns a store on dsn and table, closed in t.Cleanup.
func open(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := New(testCtx(t), opts)
	if err != nil {
		t.Fatalf("New(table %q): %v", opts.Table, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestContract runs the whole store contract on a real server with an
// injected clock (Options.Clock: the statements take now as a parameter
// instead of clock_timestamp(), and nothing else changes), so the exact
// end <= now boundary and the repeated-claim rules are checked to the
// millisecond. The peer is a second store (its own pool and LISTEN
// connection) on the same table, as another idemgate process would be.
// TestDatabaseClock and the fault tests cover the database clock.
func TestContract(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, clock *storetest.Clock) store.Store {
			return open(t, Options{DSN: srv.DSN(), Table: freshTable(), Clock: clock.Now})
		},
		NewPeer: func(t *testing.T, s store.Store, clock *storetest.Clock) store.Store {
			return open(t, Options{DSN: srv.DSN(), Table: s.(*Store).TableName(), Clock: clock.Now})
		},
		ClockStart: time.Now(),
	})
}

// dbNow reads the database clock, truncated like the store's.
func dbNow(t *testing.T, srv *pgtest.Server) time.Time {
	t.Helper()
	ms, err := srv.QueryInt("postgres", `SELECT (extract(epoch FROM date_trunc('milliseconds', clock_timestamp())) * 1000)::bigint`)
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(ms)
}

// TestDatabaseClock checks the production path: every time comes from the
// database clock, at millisecond resolution; leases end, are taken over
// and are restarted by a repeated claim on that clock.
func TestDatabaseClock(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable()})
	peer := open(t, Options{DSN: srv.DSN(), Table: s.TableName()})
	ctx := testCtx(t)
	id := store.Identity{Owner: "o", Scope: "default", Key: "k"}
	// The peer's claims "within the lease" come two or three round trips
	// after the holder's claim; the lease must outlast them on a machine
	// loaded by other test packages (300 ms did not always), and
	// the test waits for it to pass twice, so it is no longer than that.
	lease := 2 * time.Second
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t1", Lease: lease, Retention: time.Hour}
	before := dbNow(t, srv)
	res, err := s.Claim(ctx, p)
	after := dbNow(t, srv)
	if err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil || r == nil {
		t.Fatalf("Get = %+v, %v", r, err)
	}
	if r.CreatedAt.Before(before) || r.CreatedAt.After(after) || !r.CreatedAt.Equal(r.CreatedAt.Truncate(time.Millisecond)) {
		t.Fatalf("CreatedAt %v not a database time in [%v, %v] at ms resolution", r.CreatedAt, before, after)
	}
	if !res.LeaseEnd.Equal(r.CreatedAt.Add(lease)) || !r.RetentionEnd.Equal(r.CreatedAt.Add(time.Hour)) {
		t.Fatalf("lease end %v, expiry %v: want created %v + lease, + retention", res.LeaseEnd, r.RetentionEnd, r.CreatedAt)
	}
	if got, err := peer.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t2", Lease: lease, Retention: time.Hour}); err != nil || got.State != store.Running {
		t.Fatalf("peer Claim within the lease = %+v, %v; want Running", got, err)
	}
	// Past the lease: the holder's repeated claim restarts it on the
	// database clock, so the peer still sees it running.
	time.Sleep(lease + 10*time.Millisecond)
	from := dbNow(t, srv)
	again, err := s.Claim(ctx, p)
	to := dbNow(t, srv)
	if err != nil || again.State != store.Claimed || again.Takeover || again.LeaseEnd.Before(from.Add(lease)) || again.LeaseEnd.After(to.Add(lease)) {
		t.Fatalf("repeated Claim = %+v, %v; want Claimed, lease end in [%v, %v]", again, err, from.Add(lease), to.Add(lease))
	}
	if got, err := peer.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t2", Lease: lease, Retention: time.Hour}); err != nil || got.State != store.Running || !got.LeaseEnd.Equal(again.LeaseEnd) {
		t.Fatalf("peer Claim after the repeated claim = %+v, %v; want Running until %v", got, err, again.LeaseEnd)
	}
	time.Sleep(time.Until(again.LeaseEnd.Add(10 * time.Millisecond)))
	if got, err := peer.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t2", Lease: lease, Retention: time.Hour}); err != nil || got.State != store.Claimed || !got.Takeover {
		t.Fatalf("peer Claim past the lease = %+v, %v; want a takeover", got, err)
	}
	if ok, err := s.Complete(ctx, id, "t1", store.Response{Status: 200}); ok || err != nil {
		t.Fatalf("Complete by the old holder = %v, %v; want false", ok, err)
	}
	if ok, err := peer.Complete(ctx, id, "t2", store.Response{Status: 200}); !ok || err != nil {
		t.Fatalf("Complete by the new holder = %v, %v", ok, err)
	}
	r, err = s.Get(ctx, id)
	if err != nil || r == nil || r.State != store.Completed || r.Response.StoredAt.Before(again.LeaseEnd) || !r.RetentionEnd.Equal(r.Response.StoredAt.Add(time.Hour)) {
		t.Fatalf("completed record = %+v, %v", r, err)
	}
}

// countingConn counts the writes (one per round trip with pgx's extended
// protocol: Bind, Execute and Sync go out in one write) on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestRoundTrips checks that a fresh request costs two round trips (claim
// and complete, as on Valkey) and a replay one, once the statements are
// prepared on the connection.
func TestRoundTrips(t *testing.T) {
	srv := pgtest.Start(t)
	opts := Options{DSN: srv.DSN(), Table: freshTable(), MaxConns: 1, SweepInterval: -1}
	cfg, err := PoolConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	// Pooled connections only: the listening connection (made from
	// cfg.ConnConfig, without BeforeConnect) pings now and then.
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		dial := cc.DialFunc
		cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, writes: &writes}, nil
		}
		return nil
	}
	s, err := newWithConfig(testCtx(t), opts, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := testCtx(t)
	fresh := func(key string) int64 {
		id := store.Identity{Owner: "o", Scope: "default", Key: key}
		start := writes.Load()
		if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: key, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		if ok, err := s.Complete(ctx, id, key, store.Response{Status: 201, Body: []byte("x")}); !ok || err != nil {
			t.Fatalf("Complete = %v, %v", ok, err)
		}
		return writes.Load() - start
	}
	fresh("warm-up") // prepares the statements on the pooled connection
	if n := fresh("fresh"); n != 2 {
		t.Fatalf("a fresh request took %d round trips, want 2 (claim, complete)", n)
	}
	start := writes.Load()
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: store.Identity{Owner: "o", Scope: "default", Key: "fresh"}, Fingerprint: "fp", Token: "retry", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Completed {
		t.Fatalf("replay Claim = %+v, %v", res, err)
	}
	if n := writes.Load() - start; n != 1 {
		t.Fatalf("a replay took %d round trips, want 1", n)
	}
}

// TestRoleWithoutDDL: once the table exists, a role with only SELECT,
// INSERT, UPDATE and DELETE on it runs every operation, the sweep
// included; without the table it gets an error naming idemgate migrate.
func TestRoleWithoutDDL(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.CreateDatabase()
	table := "app.idem_records"
	srv.ExecIn(db, `CREATE SCHEMA app`)
	if _, err := Migrate(testCtx(t), Options{DSN: srv.DatabaseDSN(db), Table: table}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := Migrate(testCtx(t), Options{DSN: srv.DatabaseDSN(db), Table: table}); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	srv.Exec(`CREATE ROLE app_rw LOGIN PASSWORD 'pw'`)
	srv.ExecIn(db, `REVOKE ALL ON SCHEMA public FROM PUBLIC`)
	srv.ExecIn(db, `GRANT USAGE ON SCHEMA app TO app_rw`)
	srv.ExecIn(db, `GRANT SELECT, INSERT, UPDATE, DELETE ON app.idem_records, app.idem_records_index TO app_rw`)
	dsn := srv.UserDSN("app_rw", "pw", db)

	clock := storetest.NewClock(time.Now())
	s := open(t, Options{DSN: dsn, Table: table, Clock: clock.Now})
	ctx := testCtx(t)
	id := store.Identity{Owner: "o", Scope: "default", Key: "k"}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Second}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	if ok, err := s.Extend(ctx, id, "t", time.Second); !ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	if ok, err := s.Complete(ctx, id, "t", store.Response{Status: 200}); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if err := s.Index(ctx, "/r", id); err != nil {
		t.Fatalf("Index = %v", err)
	}
	if err := s.Index(ctx, "/gone", id); err != nil {
		t.Fatalf("Index = %v", err)
	}
	if n, err := s.Tombstone(ctx, store.Resource{Owner: "o", Scope: "default", Path: "/gone"}); n != 1 || err != nil {
		t.Fatalf("Tombstone = %d, %v", n, err)
	}
	clock.Advance(2 * time.Second)
	if n, err := s.Sweep(ctx); n != 1 || err != nil {
		t.Fatalf("Sweep = %d, %v; want 1 row deleted", n, err)
	}
	if ok, err := s.Delete(ctx, id); ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}

	_, err := New(testCtx(t), Options{DSN: dsn, Table: "app.missing"})
	if err == nil || !strings.Contains(err.Error(), "idemgate migrate") || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("New on a missing table without DDL rights: %v; want an error naming idemgate migrate", err)
	}
	if !strings.Contains(err.Error(), `"missing"`) || !strings.Contains(err.Error(), `"missing_index"`) {
		t.Errorf("New on a missing table names not both tables: %v", err)
	}
	// Granted on the records table only (what a README once said): the
	// error, logged while keyed requests get 503, names both tables.
	srv.ExecIn(db, `REVOKE ALL ON app.idem_records_index FROM app_rw`)
	_, err = New(testCtx(t), Options{DSN: dsn, Table: table})
	if err == nil || !strings.Contains(err.Error(), `"idem_records"`) || !strings.Contains(err.Error(), `"idem_records_index"`) || !strings.Contains(err.Error(), "grant") {
		t.Errorf("New without grants on the index table: %v; want both tables named with the grant", err)
	}
	_, err = New(testCtx(t), Options{DSN: srv.DatabaseDSN(db), Table: "app.missing", NoCreate: true})
	if err == nil || !strings.Contains(err.Error(), "idemgate migrate") {
		t.Fatalf("New with NoCreate on a missing table: %v", err)
	}
}

// TestConcurrentStartCreatesTableOnce starts replicas at once on a missing
// table: the advisory lock lets exactly one create it and every one start.
func TestConcurrentStartCreatesTableOnce(t *testing.T) {
	srv := pgtest.Start(t)
	table := freshTable()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			s, err := New(testCtx(t), Options{DSN: srv.DSN(), Table: table})
			if err == nil {
				_ = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
}

// TestSweepDeletesExpiredInBatches: expired rows (completed past retention,
// running past expiry) are deleted in batches; rows kept forever and live
// rows stay.
func TestSweepDeletesExpiredInBatches(t *testing.T) {
	srv := pgtest.Start(t)
	clock := storetest.NewClock(time.Now())
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable(), Clock: clock.Now, SweepBatch: 2, SweepInterval: -1})
	ctx := testCtx(t)
	claim := func(key string, lease, retention time.Duration, complete bool) {
		id := store.Identity{Owner: "o", Scope: "default", Key: key}
		if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: key, Lease: lease, Retention: retention}); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		if complete {
			if ok, err := s.Complete(ctx, id, key, store.Response{Status: 200}); !ok || err != nil {
				t.Fatalf("Complete = %v, %v", ok, err)
			}
		}
	}
	for i := range 5 {
		claim(fmt.Sprintf("done-%d", i), time.Second, time.Minute, true)
	}
	claim("forever", time.Second, 0, true)
	claim("running", time.Second, time.Minute, false) // expires a minute after claim
	claim("live", time.Hour, 2*time.Hour, false)
	clock.Advance(time.Minute)
	n, err := s.Sweep(ctx)
	if err != nil || n != 6 {
		t.Fatalf("Sweep = %d, %v; want 6 (5 completed, 1 running)", n, err)
	}
	left, err := srv.QueryInt("postgres", `SELECT count(*) FROM `+s.Table())
	if err != nil || left != 2 {
		t.Fatalf("rows left = %d, %v; want 2 (forever, live)", left, err)
	}
}

func TestValidateTable(t *testing.T) {
	for _, ok := range []string{"idemgate_records", "app.idemgate_records", "_x", "a1", strings.Repeat("a", 56)} {
		if err := ValidateTable(ok); err != nil {
			t.Errorf("ValidateTable(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b.c", ".a", "a.", "1a", "Records", "a-b", `a"b`, "a b", strings.Repeat("a", 57), "a;drop"} {
		if err := ValidateTable(bad); err == nil {
			t.Errorf("ValidateTable(%q) = nil, want an error", bad)
		}
	}
	if q, _ := QuoteTable("app.records"); q != `"app"."records"` {
		t.Errorf("QuoteTable = %s", q)
	}
	if c := Channel(DefaultTable); c != "idemgate_records_events" {
		t.Errorf("Channel = %s", c)
	}
	if c := Channel(strings.Repeat("a", 56) + "." + strings.Repeat("b", 56)); len(c) > 63 || !strings.HasPrefix(c, "idemgate_events_") {
		t.Errorf("Channel of a long name = %s", c)
	}
}

// TestStatementsInProtocolDoc keeps docs/protocol.md, "Store records
// (Postgres)", pointing at what the store sends: it links every file of
// sql/ and migration/, every such link names a file that exists, and every
// statement of sql/ is one the store sends (no file left unused).
func TestStatementsInProtocolDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "../store/postgres/"
	files := map[string]bool{"sql/": true, "migration/": true}
	for _, dir := range []string{"sql", "migration"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			files[dir+"/"+e.Name()] = true
			if !strings.Contains(string(doc), "]("+prefix+dir+"/"+e.Name()+")") {
				t.Errorf("docs/protocol.md does not link %s%s/%s", prefix, dir, e.Name())
			}
		}
	}
	for _, link := range strings.Split(string(doc), "]("+prefix)[1:] {
		target, _, _ := strings.Cut(link, ")")
		if (strings.HasPrefix(target, "sql/") || strings.HasPrefix(target, "migration/")) && !files[target] {
			t.Errorf("docs/protocol.md links %s%s, which does not exist", prefix, target)
		}
	}
	if !strings.Contains(string(doc), "]("+prefix+"migration/)") {
		t.Errorf("docs/protocol.md does not link the migrations directory %smigration/", prefix)
	}
	st := buildStatements(DefaultTable)
	sent := map[string]bool{
		st.claim: true, st.complete: true, st.release: true, st.extend: true, st.del: true, st.get: true,
		st.sweep: true, st.index: true, st.tombstone: true, st.sweepIndex: true,
		st.migrateLock: true, st.migrateTable: true, st.migrateVersion: true, st.migrateRecord: true,
	}
	for _, c := range st.check {
		sent[c] = true
	}
	fill := templateFor(DefaultTable)
	entries, err := os.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, err := os.ReadFile("sql/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range splitSQL(string(src)) {
			if !sent[fill(stmt)] {
				t.Errorf("sql/%s holds a statement the store never sends:\n%s", e.Name(), stmt)
			}
		}
	}
}

// TestAnswersFromSnapshotWriteNothing: a replay or a Running answer only
// reads (no row lock, no transaction id, so no WAL flush or synchronous
// standby wait per retry); a claim that takes the row writes.
func TestAnswersFromSnapshotWriteNothing(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable(), SweepInterval: -1})
	ctx := testCtx(t)
	nextXID := func() int64 {
		t.Helper()
		n, err := srv.QueryInt("postgres", `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	done := store.Identity{Owner: "o", Scope: "default", Key: "done"}
	running := store.Identity{Owner: "o", Scope: "default", Key: "running"}
	for _, id := range []store.Identity{done, running} {
		if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: id.Key, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
	}
	if ok, err := s.Complete(ctx, done, "done", store.Response{Status: 201, Body: []byte("x")}); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	before := nextXID()
	const n = 20
	for i := range n {
		tok := fmt.Sprintf("retry-%d", i)
		if res, err := s.Claim(ctx, store.ClaimParams{Identity: done, Fingerprint: "fp", Token: tok, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Completed {
			t.Fatalf("replay Claim = %+v, %v", res, err)
		}
		if res, err := s.Claim(ctx, store.ClaimParams{Identity: running, Fingerprint: "other", Token: tok, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Running {
			t.Fatalf("Claim on a running record = %+v, %v", res, err)
		}
	}
	// Two xids of slack for background work (autovacuum's analyze).
	if used := nextXID() - before; used > 2 {
		t.Fatalf("%d answers from existing records used %d transaction ids, want none", 2*n, used)
	}
	before = nextXID()
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: store.Identity{Owner: "o", Scope: "default", Key: "new"}, Fingerprint: "fp", Token: "new", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	if used := nextXID() - before; used < 1 {
		t.Fatalf("a fresh claim used %d transaction ids, want a write", used)
	}
}

// TestTableOfEarlierBuildGainsTrailers: a table created before trailers
// were kept is refused by a store that may not migrate, with a
// pointer to `idemgate migrate`, and extended by one that may; a record
// completed before then (no trailers column value) still replays, and a
// new one keeps its trailers.
func TestTableOfEarlierBuildGainsTrailers(t *testing.T) {
	srv := pgtest.Start(t)
	table := freshTable()
	ddl, err := Schema(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range ddl[:2] { // the DDL of the build before trailers
		srv.Exec(stmt)
	}
	q, _ := QuoteTable(table)
	id := store.Identity{Owner: "o", Scope: "default", Key: "old"}
	srv.Exec(`INSERT INTO `+q+` (id, owner, scope, key, state, fingerprint, recipe, created, expiry, retention_ms, status, headers, body, omitted, stored_at)
VALUES ($1, 'o', 'default', 'old', 2, 'fp', '', now(), NULL, 0, 201, ''::bytea, 'done', false, now())`, ID(id))
	if _, err := New(testCtx(t), Options{DSN: srv.DSN(), Table: table, NoCreate: true}); err == nil || !strings.Contains(err.Error(), "idemgate migrate") {
		t.Fatalf("New with NoCreate on a table without trailers = %v; want an error naming idemgate migrate", err)
	}
	s := open(t, Options{DSN: srv.DSN(), Table: table})
	ctx := testCtx(t)
	res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Hour})
	if err != nil || res.State != store.Completed || res.Response == nil || string(res.Response.Body) != "done" || len(res.Response.Trailer) != 0 {
		t.Fatalf("Claim of the earlier record = %+v, %v", res, err)
	}
	id.Key = "new"
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Grpc-Status": {"0"}}
	if ok, err := s.Complete(ctx, id, "t", store.Response{Status: 200, Body: []byte("x"), Trailer: want}); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil || r == nil || r.Response == nil || !reflect.DeepEqual(r.Response.Trailer, want) {
		t.Fatalf("Get = %+v, %v; want trailers %v", r, err, want)
	}
}

// TestTableOfEarlierBuildGainsTombstones: a table created before
// tombstones (state CHECK 1, 2; no index table) is refused by a store that
// may not migrate, with a pointer to `idemgate migrate`, and migrated by
// one that may: its CHECK then admits gone, the index table exists, a
// record completed before then is tombstoned, and the sweep removes
// expired index rows.
func TestTableOfEarlierBuildGainsTombstones(t *testing.T) {
	srv := pgtest.Start(t)
	table := freshTable()
	ddl, err := Schema(table)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(ddl[0], "CHECK (state IN (1, 2, 3))", "CHECK (state IN (1, 2))", 1)
	if old == ddl[0] {
		t.Fatal("table DDL has no state CHECK (1, 2, 3)")
	}
	for _, stmt := range []string{old, ddl[1], ddl[2]} { // the DDL of the build before tombstones
		srv.Exec(stmt)
	}
	q, _ := QuoteTable(table)
	id := store.Identity{Owner: "o", Scope: "default", Key: "old"}
	srv.Exec(`INSERT INTO `+q+` (id, owner, scope, key, state, fingerprint, recipe, created, expiry, retention_ms, status, headers, body, omitted, stored_at)
VALUES ($1, 'o', 'default', 'old', 2, 'fp', '', now(), now() + interval '1 hour', 3600000, 201, ''::bytea, 'done', false, now())`, ID(id))
	if _, err := New(testCtx(t), Options{DSN: srv.DSN(), Table: table, NoCreate: true}); err == nil || !strings.Contains(err.Error(), "idemgate migrate") {
		t.Fatalf("New with NoCreate on a table before tombstones = %v; want an error naming idemgate migrate", err)
	}
	if _, err := Migrate(testCtx(t), Options{DSN: srv.DSN(), Table: table}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := Migrate(testCtx(t), Options{DSN: srv.DSN(), Table: table}); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if n, err := srv.QueryInt("postgres", `SELECT count(*) FROM pg_constraint WHERE conrelid = '`+q+`'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%state%'`); err != nil || n != 1 {
		t.Fatalf("state CHECK constraints after Migrate = %d, %v; want 1", n, err)
	}
	clock := storetest.NewClock(time.Now())
	s := open(t, Options{DSN: srv.DSN(), Table: table, Clock: clock.Now, SweepInterval: -1})
	ctx := testCtx(t)
	if err := s.Index(ctx, "/v1/orders/1", id); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Tombstone(ctx, store.Resource{Owner: "o", Scope: "default", Path: "/v1/orders/1"}); n != 1 || err != nil {
		t.Fatalf("Tombstone of the earlier record = %d, %v", n, err)
	}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Hour}); err != nil || res.State != store.Gone {
		t.Fatalf("Claim of the tombstone = %+v, %v", res, err)
	}
	// An index row whose record expires is swept with it.
	id2 := store.Identity{Owner: "o", Scope: "default", Key: "new"}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id2, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Second}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Complete(ctx, id2, "t", store.Response{Status: 201}); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if err := s.Index(ctx, "/v1/orders/2", id2); err != nil {
		t.Fatal(err)
	}
	count := func() int64 {
		n, err := srv.QueryInt("postgres", `SELECT count(*) FROM `+indexTableName(q))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("index rows = %d, want 1", n)
	}
	clock.Advance(2 * time.Second)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("index rows after the sweep = %d, want 0", n)
	}
}
