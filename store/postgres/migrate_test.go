package postgres

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestMigrationFiles: every file of migration/ is embedded, named
// NNN_name.up.sql and numbered from 001 without gaps, and Schema is their
// statements in order.
func TestMigrationFiles(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("migration")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(entries) || SchemaVersion() != len(entries) {
		t.Fatalf("%d migrations embedded, SchemaVersion %d, %d files in migration/", len(ms), SchemaVersion(), len(entries))
	}
	var want []string
	for i, m := range ms {
		if m.name != entries[i].Name() || !strings.HasSuffix(m.name, ".up.sql") {
			t.Errorf("migration %d is %s, file %s", m.version, m.name, entries[i].Name())
		}
		want = append(want, splitSQL(m.src)...)
	}
	ddl, err := Schema(DefaultTable)
	if err != nil || !reflect.DeepEqual(ddl, want) {
		t.Fatalf("Schema(DefaultTable) = %q, %v; want the statements of migration/ in order", ddl, err)
	}
}

// versionRows counts the rows of table's schema version table.
func versionRows(t *testing.T, srv *pgtest.Server, table string) int64 {
	t.Helper()
	q, _ := QuoteTable(VersionTable(table))
	n, err := srv.QueryInt("postgres", `SELECT count(*) FROM `+q)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateVersions: Migrate gives a fresh database every migration and
// records each; a second run applies nothing; dropped tables are made
// again; tables made by a build from
// before schema versions (migration 1's DDL, which is what that build ran)
// are adopted as version 1 with every row kept; a version newer than the
// build knows is refused with ErrSchemaNewer, by Migrate and by a store
// that would migrate.
func TestMigrateVersions(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := testCtx(t)
	latest := SchemaVersion()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, m := range ms {
		all = append(all, m.name)
	}

	fresh := freshTable()
	res, err := Migrate(ctx, Options{DSN: srv.DSN(), Table: fresh})
	if err != nil || res.From != 0 || res.To != latest || res.Adopted || !reflect.DeepEqual(res.Applied, all) {
		t.Fatalf("Migrate of a fresh database = %+v, %v; want 0 -> %d applying %v", res, err, latest, all)
	}
	if n := versionRows(t, srv, fresh); n != int64(latest) {
		t.Fatalf("version rows = %d, want %d", n, latest)
	}
	res, err = Migrate(ctx, Options{DSN: srv.DSN(), Table: fresh})
	if err != nil || res.From != latest || res.To != latest || len(res.Applied) != 0 || res.Adopted {
		t.Fatalf("second Migrate = %+v, %v; want nothing applied at %d", res, err, latest)
	}
	if n := versionRows(t, srv, fresh); n != int64(latest) {
		t.Fatalf("version rows after a second Migrate = %d, want %d", n, latest)
	}

	// Tables dropped while their versions stay recorded are made again,
	// as a store that found them missing always had them made.
	fq, _ := QuoteTable(fresh)
	srv.Exec(`DROP TABLE ` + fq + `, ` + indexTableName(fq))
	res, err = Migrate(ctx, Options{DSN: srv.DSN(), Table: fresh})
	if err != nil || res.From != 0 || res.To != latest || res.Adopted || !reflect.DeepEqual(res.Applied, all) {
		t.Fatalf("Migrate after the tables were dropped = %+v, %v; want 0 -> %d applying %v", res, err, latest, all)
	}
	if n := versionRows(t, srv, fresh); n != int64(latest) {
		t.Fatalf("version rows after the tables were made again = %d, want %d", n, latest)
	}

	// A database of a build from before schema versions: its tables, made
	// by the DDL of migration 1, and rows written through them.
	old := freshTable()
	fill := templateFor(old)
	for _, stmt := range splitSQL(ms[0].src) {
		srv.Exec(fill(stmt))
	}
	clock := storetest.NewClock(time.Now())
	s, err := New(ctx, Options{DSN: srv.DSN(), Table: old, NoCreate: true, Clock: clock.Now, SweepInterval: -1})
	if err != nil {
		t.Fatalf("New on the tables of a build from before versions: %v", err)
	}
	done := store.Identity{Owner: "o", Scope: "default", Key: "done"}
	running := store.Identity{Owner: "o", Scope: "default", Key: "running"}
	for _, id := range []store.Identity{done, running} {
		if r, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: id.Key, Lease: time.Minute, Retention: time.Hour}); err != nil || r.State != store.Claimed {
			t.Fatalf("Claim = %+v, %v", r, err)
		}
	}
	resp := store.Response{Status: 201, Body: []byte("kept"), Trailer: map[string][]string{"Grpc-Status": {"0"}}}
	if ok, err := s.Complete(ctx, done, "done", resp); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if err := s.Index(ctx, "/v1/orders/1", done); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	res, err = Migrate(ctx, Options{DSN: srv.DSN(), Table: old})
	if err != nil || res.From != 0 || res.To != latest || !res.Adopted || !reflect.DeepEqual(res.Applied, all) {
		t.Fatalf("Migrate of tables from before versions = %+v, %v; want adopted, 0 -> %d", res, err, latest)
	}
	s = open(t, Options{DSN: srv.DSN(), Table: old, NoCreate: true, Clock: clock.Now, SweepInterval: -1})
	r, err := s.Get(ctx, done)
	if err != nil || r == nil || r.State != store.Completed || r.Response == nil || string(r.Response.Body) != "kept" || r.Response.Status != 201 || r.Response.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("Get of a completed row after the migration = %+v, %v", r, err)
	}
	if r, err := s.Get(ctx, running); err != nil || r == nil || r.State != store.Running || r.Token != "running" {
		t.Fatalf("Get of a running row after the migration = %+v, %v", r, err)
	}
	if n, err := s.Tombstone(ctx, store.Resource{Owner: "o", Scope: "default", Path: "/v1/orders/1"}); n != 1 || err != nil {
		t.Fatalf("Tombstone through an index entry written before the migration = %d, %v; want 1", n, err)
	}

	// A later build migrated the tables: this one refuses, and says which
	// versions it knows.
	vq, _ := QuoteTable(VersionTable(fresh))
	srv.Exec(`INSERT INTO `+vq+` (version, name) VALUES ($1, 'from a later build')`, latest+1)
	_, err = Migrate(ctx, Options{DSN: srv.DSN(), Table: fresh})
	if !errors.Is(err, ErrSchemaNewer) || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", latest+1)) {
		t.Fatalf("Migrate of a schema newer than the build = %v; want ErrSchemaNewer naming version %d", err, latest+1)
	}
	if n := versionRows(t, srv, fresh); n != int64(latest)+1 {
		t.Fatalf("version rows after a refused Migrate = %d, want %d", n, latest+1)
	}
	// A store that would migrate (its table lacks a column) refuses too.
	srv.Exec(`ALTER TABLE ` + fq + ` DROP COLUMN response`)
	if _, err := New(ctx, Options{DSN: srv.DSN(), Table: fresh}); !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("New on a schema newer than the build, lacking a column = %v; want ErrSchemaNewer", err)
	}
}
