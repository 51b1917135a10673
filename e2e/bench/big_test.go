package main

import (
	"testing"
	"time"
)

// TestBigSmoke runs the big workload (wBig) briefly on the bare proxy
// and idemgate with the memory and Valkey stores: on idemgate every 1 MiB
// POST is answered 201 with the whole body echoed (within the default
// 1 MiB limits) and none is a replay, and the report takes the rows.
func TestBigSmoke(t *testing.T) {
	o := options{
		duration: 2 * time.Second, rounds: 1, concurrency: 8,
		workloads: []string{wBig}, targets: "BCD", logLevel: "info",
	}
	rep := runBrief(t, o)
	if len(rep.rows) != len(o.targets) {
		t.Fatalf("%d result rows, want %d", len(rep.rows), len(o.targets))
	}
	for _, r := range rep.rows {
		if r.target.id == "B" && r.s.requests > 0 && r.s.errors*100 <= r.s.requests {
			// The bare ReverseProxy now and then cuts a 1 MiB answer
			// ("ReverseProxy read error during body copy: use of closed
			// network connection" in its log), mostly under -race: the
			// baseline's, not idemgate's, so it is reported, not failed.
			if r.s.errors > 0 {
				t.Logf("big on B: %d of %d answers cut (%s)", r.s.errors, r.s.requests, r.s.firstErr)
			}
			continue
		}
		if r.s.requests == 0 || r.s.errors != 0 || r.s.replayed != 0 || r.s.codes[201] != r.s.requests {
			t.Errorf("big on %s: %d requests, %d errors (first: %s), %d replays, codes %v", r.target.id, r.s.requests, r.s.errors, r.s.firstErr, r.s.replayed, r.s.codes)
		}
	}
	if md := rep.markdown(); len(md) == 0 {
		t.Error("empty report")
	}
}
