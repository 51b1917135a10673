package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// TestE2EPostgresTwoInstances runs two idemgate processes on one
// PostgreSQL database (the table created by the first to start): a request
// is forwarded once and replayed byte for byte by the other instance, and
// concurrent duplicates spread over both reach the upstream once per key.
func TestE2EPostgresTwoInstances(t *testing.T) {
	pg := pgtest.Start(t)
	up := startUpstream(t)
	c := gateConfig{Upstream: up.URL, PostgresDSN: pg.DSN()}
	gates := []*Gate{startGate(t, c), startGate(t, c)}

	first := mustPost(t, gates[0].URL+"/v1/orders", "alice", "k-1", `{"amount":42}`)
	if first.Status != 201 || first.replayed() {
		t.Fatalf("first: %d %v", first.Status, first.Header)
	}
	for _, g := range gates {
		again := mustPost(t, g.URL+"/v1/orders", "alice", "k-1", `{"amount":42}`)
		if again.Status != 201 || !again.replayed() || !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("replay: %d replayed=%v %q, want 201, replayed, %q", again.Status, again.replayed(), again.Body, first.Body)
		}
		for _, name := range []string{"Location", "Etag", "Set-Cookie", "Date"} {
			if g, w := again.Header.Values(name), first.Header.Values(name); fmt.Sprint(g) != fmt.Sprint(w) {
				t.Errorf("%s = %q, want %q", name, g, w)
			}
		}
	}
	if a := mustPost(t, gates[1].URL+"/v1/orders", "alice", "k-1", `{"amount":43}`); a.Status != 422 {
		t.Fatalf("key reused for another body: %d, want 422", a.Status)
	}
	if n := up.Calls("alice", "k-1"); n != 1 {
		t.Fatalf("k-1 executed %d times, want 1", n)
	}

	up.Set(nil, 300*time.Millisecond, nil)
	const keys, dup = 10, 8
	answers := make([][]Answer, keys)
	var wg sync.WaitGroup
	for k := range keys {
		answers[k] = make([]Answer, dup)
		for d := range dup {
			wg.Go(func() {
				answers[k][d] = post(context.Background(), gates[d%2].URL+"/v1/orders", "bob", fmt.Sprintf("key-%d", k), "{}")
			})
		}
	}
	wg.Wait()
	for k := range keys {
		if n := up.Calls("bob", fmt.Sprintf("key-%d", k)); n != 1 {
			t.Errorf("key-%d executed %d times, want 1", k, n)
		}
		for d, a := range answers[k] {
			if a.Err != nil || a.Status != 201 || !bytes.Equal(a.Body, answers[k][0].Body) {
				t.Errorf("key-%d answer %d: %d %v, want 201 and answer 0's body", k, d, a.Status, a.Err)
			}
		}
	}
}

// TestE2EPostgresDownFailsClosed: with PostgreSQL stopped a keyed request
// is refused with 503 and never forwarded; once it is back the same
// process forwards and replays again without a restart.
func TestE2EPostgresDownFailsClosed(t *testing.T) {
	pg := pgtest.Start(t)
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, PostgresDSN: pg.DSN()})
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "before", "{}"); a.Status != 201 {
		t.Fatalf("before: %d", a.Status)
	}
	pg.Stop()
	for _, key := range []string{"before", "during-1", "during-2"} {
		if a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}"); a.Status != 503 {
			t.Fatalf("%s with Postgres down: %d %s, want 503", key, a.Status, a.Body)
		}
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("upstream executed %d requests, want 1 (nothing forwarded while Postgres was down)", n)
	}
	pg.Start()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := mustPost(t, g.URL+"/v1/orders", "alice", "after", "{}")
		if a.Status == 201 {
			break
		}
		if a.Status != 503 || time.Now().After(deadline) {
			t.Fatalf("after Postgres came back: %d %s", a.Status, a.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "before", "{}"); a.Status != 201 || !a.replayed() {
		t.Fatalf("before, replayed after the outage: %d replayed=%v", a.Status, a.replayed())
	}
	if n := up.Calls("alice", "after"); n != 1 {
		t.Fatalf("after executed %d times, want 1", n)
	}
}

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
