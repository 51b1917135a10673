package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// TestMigrate: `idemgate migrate` creates the table on a real server, again
// without harm, and refuses a config that is not for the postgres store.
func TestMigrate(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.CreateDatabase()
	srv.ExecIn(db, "CREATE SCHEMA app")
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	cfg := fmt.Sprintf("upstream: {url: 'http://127.0.0.1:3000'}\nstore:\n  driver: postgres\n  postgres:\n    dsn: %q\n    table: app.records\n", srv.DatabaseDSN(db))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var out, errOut bytes.Buffer
		if code := run([]string{"migrate", "--config", path}, &out, &errOut); code != 0 {
			t.Fatalf("migrate: exit %d: %s", code, errOut.String())
		}
		// Both tables are named, so an operator grants on both.
		if !strings.Contains(out.String(), "app.records (records)") || !strings.Contains(out.String(), "app.records_index (resource index)") {
			t.Errorf("migrate output does not name both tables: %q", out.String())
		}
	}
	for _, tbl := range []string{"records", "records_index"} {
		if n, err := srv.QueryInt(db, `SELECT count(*) FROM pg_tables WHERE schemaname = 'app' AND tablename = $1`, tbl); err != nil || n != 1 {
			t.Errorf("table app.%s: %d, %v", tbl, n, err)
		}
	}
	if n, err := srv.QueryInt(db, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'app' AND tablename = 'records'`); err != nil || n != 2 {
		t.Fatalf("indexes on app.records = %d, %v; want 2 (primary key, expiry)", n, err)
	}
	memory := filepath.Join(t.TempDir(), "memory.yaml")
	if err := os.WriteFile(memory, []byte("upstream: {url: 'http://127.0.0.1:3000'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"migrate", "--config", memory}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "only the postgres store") {
		t.Fatalf("migrate of a memory config: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"migrate"}, &out, &errOut); code != 2 {
		t.Fatalf("migrate without --config: exit %d, want 2", code)
	}
}

// TestMigrateSchemaVersions: `idemgate migrate` prints each migration it
// applies and the version reached, applies nothing the second time, and
// refuses a schema newer than the build with exit 1. The adoption of
// tables from before schema versions is store/postgres's
// TestMigrateVersions.
func TestMigrateSchemaVersions(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.CreateDatabase()
	config := func(table string) string {
		path := filepath.Join(t.TempDir(), "idemgate.yaml")
		cfg := fmt.Sprintf("upstream: {url: 'http://127.0.0.1:3000'}\nstore:\n  driver: postgres\n  postgres:\n    dsn: %q\n    table: %s\n", srv.DatabaseDSN(db), table)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	migrate := func(path string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run([]string{"migrate", "--config", path}, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	latest := postgres.SchemaVersion()
	fresh := config("fresh")
	code, out, errOut := migrate(fresh)
	if code != 0 || !strings.Contains(out, "applied 001_initial_schema.up.sql\n") || !strings.Contains(out, fmt.Sprintf("schema version 0 -> %d, recorded in fresh_schema\n", latest)) {
		t.Fatalf("first migrate: exit %d, stdout %q, stderr %q; want 001 applied, 0 -> %d", code, out, errOut, latest)
	}
	code, out, errOut = migrate(fresh)
	if code != 0 || strings.Contains(out, "applied") || !strings.Contains(out, fmt.Sprintf("schema version %d is current; nothing to apply\n", latest)) {
		t.Fatalf("second migrate: exit %d, stdout %q, stderr %q; want nothing applied", code, out, errOut)
	}

	srv.ExecIn(db, `INSERT INTO fresh_schema (version, name) VALUES ($1, 'later')`, latest+1)
	code, out, errOut = migrate(fresh)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("schema version %d and this build knows versions up to %d", latest+1, latest)) {
		t.Fatalf("migrate of a schema newer than the build: exit %d, stdout %q, stderr %q; want exit 1 naming both versions", code, out, errOut)
	}
}
