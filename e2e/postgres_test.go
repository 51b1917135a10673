package e2e

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// The main flows (forward and replay across two instances, key reuse,
// owners, concurrent duplicates, client disconnect, store down and back)
// run on PostgreSQL as subtests of the tests in proxy_test.go (onStores).

// postgresStorm is PostgreSQL with fsync and synchronous_commit on (its
// defaults); the crash is a kill -9 of the postmaster and every backend.
func postgresStorm(t *testing.T, c gateConfig) stormFaults {
	pg := pgtest.Start(t, pgtest.WithFsync())
	c.PostgresDSN = pg.DSN()
	return stormFaults{config: c, kill: func() (time.Time, time.Time) { now := time.Now(); pg.Kill(); return now, time.Time{} }, restart: pg.Start}
}

// TestStormPostgres runs the storm of TestStorm (two instances, duplicates
// racing across them, the store crashed and down for 3 s at a third, one
// instance SIGKILLed at two thirds) on PostgreSQL, with on_abandoned:
// takeover; the Valkey runs cover reject too.
func TestStormPostgres(t *testing.T) {
	requests, pairs := 3000, 2100
	if *stormFull {
		requests, pairs = 10000, 7000
	}
	logStorm(t, "on Postgres", runStorm(t, requests, pairs, "takeover", postgresStorm))
}
