package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/e2e/internal/nginxtest"
	"github.com/idemgate/idemgate/internal/needs"
)

// TestBenchSmoke runs every workload of the benchmark briefly against
// targets A to E, N and G and checks what must hold on any machine: no errors, replays
// answered from the store, one upstream call for a storm of duplicates,
// two store round trips per fresh request on Valkey and on PostgreSQL, idle
// connections held open. E's PostgreSQL runs with fsync off here, for a
// faster start. nginx (target N) is not installed here: scripts/test.sh
// does, and without it the test fails saying how.
func TestBenchSmoke(t *testing.T) {
	if _, err := nginxtest.Find(); err != nil {
		needs.Missing(t, "nginx", err.Error())
	}
	o := options{
		duration: 100 * time.Millisecond, rounds: 1, concurrency: 8,
		openFractions: []float64{0.25}, dupRequests: 50, idleConns: 20,
		idleSettle: 100 * time.Millisecond, replayKeys: 50,
		workloads: []string{wFresh, wReplay, wMix, wPassthrough}, targets: "ABCDENG", logLevel: "info",
		pgFsync: false, pgConns: 16, installNginx: false,
	}
	rep := runBrief(t, o)
	if want := len(o.workloads) * len(o.targets) * (1 + len(o.openFractions)); len(rep.rows) != want {
		t.Fatalf("%d result rows, want %d", len(rep.rows), want)
	}
	for _, r := range rep.rows {
		name := r.workload + " " + r.mode + " " + r.target.id
		if r.s.requests == 0 || r.s.errors != 0 {
			t.Errorf("%s: %d requests, %d errors (first: %s)", name, r.s.requests, r.s.errors, r.s.firstErr)
		}
		idem := strings.Contains("CDEG", r.target.id)
		switch {
		case r.workload == wReplay && idem && r.s.replayed != r.s.requests:
			t.Errorf("%s: %d of %d answers were replays, want all", name, r.s.replayed, r.s.requests)
		case (r.workload == wFresh || r.workload == wPassthrough || !idem) && r.s.replayed != 0:
			t.Errorf("%s: %d replays, want none", name, r.s.replayed)
		}
		if r.target.meter != nil && r.workload == wFresh {
			if trips := r.perReq(r.storeTrips); trips < 2 || trips > 2.1 {
				t.Errorf("%s: %.2f store round trips per request, want 2 (claim, complete)", name, trips)
			}
		}
	}
	for _, d := range rep.dups {
		want := int64(o.dupRequests)
		if strings.Contains("CDEG", d.target.id) {
			want = 1
		}
		if d.s.upstreamCalls != want || d.s.errors != 0 {
			t.Errorf("duplicates on %s: %d upstream calls (want %d), %d errors (%s)", d.target.id, d.s.upstreamCalls, want, d.s.errors, d.s.firstErr)
		}
	}
	for _, x := range rep.idle {
		if x.s.errors != 0 || x.s.fds < x.s.conns {
			t.Errorf("idle connections on %s: %d errors (%s), %d fds for %d connections", x.target.id, x.s.errors, x.s.firstErr, x.s.fds, x.s.conns)
		}
	}
	if md := rep.markdown(); len(md) == 0 {
		t.Error("empty report")
	}
}

// runBrief runs the bench with o, as the tests of this package do: it
// needs valkey-server (it fails saying how to install it), builds the
// binaries from the module root and stops by testContext's deadline.
func runBrief(t *testing.T, o options) *report {
	t.Helper()
	if _, err := exec.LookPath("valkey-server"); err != nil {
		needs.Missing(t, "valkey-server", valkeyInstall)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := measureAll(testContext(t), o, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// testContext bounds a bench run by the test's own deadline (go test
// -timeout) less a minute, left to stop what the run started and report,
// rather than by a fixed time: the run first builds its binaries, and on
// a loaded machine the builds alone can take minutes (a fixed 2 minutes
// killed go build of cmd/idemgate mid-link), while each workload bounds
// its own load phases.
func testContext(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		c, cancel := context.WithDeadline(ctx, d.Add(-time.Minute))
		t.Cleanup(cancel)
		ctx = c
	}
	return ctx
}
