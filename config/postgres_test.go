package config

import (
	"strings"
	"testing"
)

// TestPostgresStore checks the store.postgres keys: defaults, environment
// overrides and every validation error, each naming its key path and never
// echoing the DSN (it may hold a password).
func TestPostgresStore(t *testing.T) {
	c := mustParse(t, base+"store: {driver: postgres, postgres: {dsn: 'postgres://u:pw@db:5432/app'}}\n")
	if c.Store.Driver != DriverPostgres || c.Store.Postgres.Table != "idemgate_records" || c.Store.Postgres.MaxConns != 0 {
		t.Fatalf("store = %+v, want driver postgres, default table, max_conns 0", c.Store)
	}
	c = mustParse(t, base+"store: {driver: postgres, postgres: {table: app.records, max_conns: 8}}\n",
		"IDEMGATE_STORE_POSTGRES_DSN=host=db user=u password=secret", "IDEMGATE_STORE_POSTGRES_MAX_CONNS=12")
	if c.Store.Postgres.DSN != "host=db user=u password=secret" || c.Store.Postgres.Table != "app.records" || c.Store.Postgres.MaxConns != 12 {
		t.Fatalf("postgres = %+v, want the environment's DSN and max_conns", c.Store.Postgres)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"store: {driver: postgres}", "store.postgres.dsn: is required for driver postgres (or set IDEMGATE_STORE_POSTGRES_DSN)"},
		{"store: {driver: postgres, postgres: {dsn: 'postgres://u:hunter2@db/app', table: 'Records'}}", "store.postgres.table:"},
		{"store: {driver: postgres, postgres: {dsn: 'postgres://u:hunter2@db/app', table: 'a.b.c'}}", "store.postgres.table:"},
		{"store: {driver: postgres, postgres: {dsn: 'postgres://u:hunter2@db/app', max_conns: -1}}", "store.postgres.max_conns: -1 must be 0 (default) to 10000"},
		{"store: {driver: postgres, postgres: {dsn: 'postgres://u:hunter2@db/app', pool: 3}}", "store.postgres.pool"},
		{"store: {driver: pg}", "must be memory, valkey, bolt or postgres"},
		{"store: {driver: postgres, postgres: {dsn: 'postgres://u:hunter2@db:notaport/app'}}", "store.postgres.dsn: is neither a libpq URL nor a key=value connection string"},
		{"store: {driver: postgres, postgres: {dsn: 'host=db password=hunter2 sslmode=sideways'}}", "store.postgres.dsn: is neither"},
	} {
		_, err := Load(writeFile(t, base+tc.yaml+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error echoes the DSN's password: %v", tc.yaml, err)
		}
	}
}
