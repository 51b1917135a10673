package e2e

import (
	"testing"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// The main flows (forward and replay across two instances, key reuse,
// owners, concurrent duplicates, client disconnect, store down and back)
// run on PostgreSQL as subtests of the tests in proxy_test.go (onStores).

// postgresStorm is PostgreSQL with fsync and synchronous_commit on (its
// defaults); the crash is a kill -9 of the postmaster and every backend.
func postgresStorm(t *testing.T, c gateConfig) (gateConfig, func(), func()) {
	pg := pgtest.Start(t, pgtest.WithFsync())
	c.PostgresDSN = pg.DSN()
	return c, pg.Kill, pg.Start
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
	st := runStorm(t, requests, pairs, "takeover", postgresStorm)
	t.Logf("storm on Postgres: scheduled %d, sent %d (with client retries), pairs %d", st.scheduled, st.sent, st.pairs)
	t.Logf("answers by class: %v", sortedCounts(st.byClass))
	t.Logf("pairs whose first execution completed: %d, duplicate executions among them: %d", st.cleanPairs, st.dupClean)
	t.Logf("pairs whose first execution was cut by the SIGKILL: %d, executed twice: %d", st.ambiguousPairs, st.dupAmbiguous)
	t.Logf("cross-owner replays: %d, inconsistent 201 bodies: %d, lost completed records: %d, forwards while the store was down: %d",
		st.crossOwner, st.inconsistent, st.lostCompleted, st.forwardsStoreDown)
	t.Logf("verification pass by class: %v", sortedCounts(st.verifyByClass))
}
