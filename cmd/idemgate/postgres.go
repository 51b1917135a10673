package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/config/drivers"
	"github.com/idemgate/idemgate/store/postgres"
)

// migrateTimeout bounds `idemgate migrate`, waiting for the advisory lock
// another replica may hold included.
const migrateTimeout = time.Minute

// migrate runs `idemgate migrate --config FILE`: it applies the Postgres
// store's pending schema migrations (postgres.Migrate: the records and
// resource index tables, and the schema version table), prints each one it
// applied, and does nothing else, for operators whose serving role has no
// DDL rights. A schema newer than this build is refused. Exit 0 on
// success, 1 on failure, 2 on a usage error.
func migrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file whose store.postgres section names the database and table")
	dsn := fs.String("postgres-dsn", "", "overrides store.postgres.dsn")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "idemgate migrate: --config FILE is required")
		return 2
	}
	// The flag merges like serve's flags, in config.Load, so it is parsed
	// and validated as the key it sets.
	var overrides map[string]string
	if *dsn != "" {
		overrides = map[string]string{"store.postgres.dsn": *dsn}
	}
	cfg, err := config.Load(*path, os.Environ(), config.WithOverrides(overrides))
	if err != nil {
		fmt.Fprintf(stderr, "idemgate migrate: %s is invalid:\n", *path)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
		return 1
	}
	if cfg.Store.Driver != config.DriverPostgres {
		fmt.Fprintf(stderr, "idemgate migrate: store.driver is %q; only the postgres store has a schema to create\n", cfg.Store.Driver)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	res, err := postgres.Migrate(ctx, drivers.PostgresOptions(cfg.Store.Postgres))
	if err != nil {
		fmt.Fprintf(stderr, "idemgate migrate: %v\n", err)
		return 1
	}
	t := cfg.Store.Postgres.Table
	if res.Adopted {
		fmt.Fprintf(stdout, "found table %s without a schema version (made by a build from before versions); migration 1 keeps its rows\n", t)
	}
	for _, name := range res.Applied {
		fmt.Fprintf(stdout, "applied %s\n", name)
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(stdout, "schema version %d is current; nothing to apply\n", res.To)
	} else {
		fmt.Fprintf(stdout, "schema version %d -> %d, recorded in %s\n", res.From, res.To, postgres.VersionTable(t))
	}
	// Both tables are named: the serving role needs grants on each.
	fmt.Fprintf(stdout, "tables %s (records) and %s (resource index) are in place; the serving role needs SELECT, INSERT, UPDATE, DELETE on both\n", t, postgres.IndexTable(t))
	return 0
}
