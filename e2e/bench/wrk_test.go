package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
)

// TestBenchWrkSmoke runs the closed loop with wrk, as the bench does by
// default, on B and D (D on layout 5): wrk's requests are the targeter's
// (every replay answered from the store, fresh keys 2 round trips each),
// none fails, and wrk's own CPU is what the load generator column shows.
func TestBenchWrkSmoke(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		needs.Missing(t, "wrk", wrkInstallHint)
	}
	o := options{
		duration: time.Second, rounds: 1, concurrency: 8, warmup: time.Second,
		openFractions: []float64{0.25}, replayKeys: 50,
		workloads: []string{wFresh, wReplay}, targets: "BD", logLevel: "info",
		loader: loaderWrk, valkeyLayout: 5,
	}
	rep := runBrief(t, o)
	// Per workload and target: the warm-up, the closed loop, each open one.
	if want := len(o.workloads) * len(o.targets) * (2 + len(o.openFractions)); len(rep.rows) != want {
		t.Fatalf("%d result rows, want %d", len(rep.rows), want)
	}
	for _, r := range rep.rows {
		name := r.workload + " " + r.mode + " " + r.target.id
		if r.s.requests == 0 || r.s.errors != 0 {
			t.Errorf("%s: %d requests, %d errors (first: %s)", name, r.s.requests, r.s.errors, r.s.firstErr)
		}
		if r.mode != "closed" && r.mode != modeWarmup {
			continue
		}
		if r.loadCPUSec <= 0 {
			t.Errorf("%s: load generator CPU %v, want wrk's own", name, r.loadCPUSec)
		}
		switch {
		case r.workload == wReplay && r.target.id == "D" && r.mode == "closed" && r.s.replayed != r.s.requests:
			t.Errorf("%s: %d of %d answers were replays, want all", name, r.s.replayed, r.s.requests)
		case r.workload == wFresh && r.s.replayed != 0:
			t.Errorf("%s: %d replays, want none", name, r.s.replayed)
		}
		if r.target.meter != nil && r.workload == wFresh {
			if trips := r.perReq(r.storeTrips); trips < 2 || trips > 2.1 {
				t.Errorf("%s: %.2f store round trips per request, want 2 (claim, complete)", name, trips)
			}
			if ops := r.perReq(r.storeOps); ops > 3.5 {
				t.Errorf("%s: %.2f Valkey commands per request, want 3 on layout 5 (SET; EVALSHA running one SET)", name, ops)
			}
		}
	}
}
