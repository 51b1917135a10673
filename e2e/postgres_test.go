package e2e

import (
	"fmt"
	"net/http"
	"sync"
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

// TestFaultPostgresKilledDuringCall: the binary's shape of the middleware's
// TestPostgresKilledWhileTheHandlerRuns. PostgreSQL is killed (SIGKILL)
// while the upstream acts and stays away for longer than the lease, so
// the response cannot be recorded when the upstream answers. Once
// PostgreSQL is back, the retry is replayed that response (or refused
// until it is recorded), never run again, on a reject route and on a
// takeover route alike.
func TestFaultPostgresKilledDuringCall(t *testing.T) {
	for _, mode := range []string{"reject", "takeover"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // each on a server of its own; the outages take most of the time
			pg := pgtest.Start(t, pgtest.WithFsync())
			up := startUpstream(t)
			var once sync.Once
			up.Set(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Idempotency-Key") == "k-pg" {
					once.Do(pg.Kill) // the upstream acted; the store is gone when it answers
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"key":%q}`, r.Header.Get("Idempotency-Key"))
			}, 0, nil)
			g := startGate(t, gateConfig{Upstream: up.URL, PostgresDSN: pg.DSN(),
				Routes: ordersRoute("lease: 1s", "on_abandoned: "+mode)})
			if a := mustPost(t, g.URL+"/v1/orders", "alice", "warm", "{}"); a.Status != http.StatusCreated {
				t.Fatalf("warm-up: %v", a)
			}
			first := postTimeout(30*time.Second, g.URL+"/v1/orders", "alice", "k-pg", "{}")
			t.Logf("first, its response not recorded: %v", first)
			time.Sleep(2500 * time.Millisecond) // the outage outlasts the lease
			pg.Start()
			var retry Answer
			eventually(t, 30*time.Second, "a final answer once PostgreSQL is back", func() bool {
				retry = postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "k-pg", "{}")
				if retry.isProblem(409, "outcome-unknown") {
					t.Fatalf("retry: %v; the response is held by the instance, want it recorded and replayed", retry)
				}
				return retry.Err == nil && retry.Status != http.StatusServiceUnavailable && retry.Status != http.StatusConflict
			})
			if n := up.Calls("alice", "k-pg"); n != 1 {
				t.Fatalf("upstream ran the operation %d times, want 1 (retry %v)", n, retry)
			}
			if retry.Status != http.StatusCreated || !retry.replayed() {
				t.Fatalf("retry: %v; want the replay", retry)
			}
		})
	}
}
