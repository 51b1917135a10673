package main

import (
	"testing"
	"time"
)

// TestBigSmoke runs the big workload (wBig) briefly on the bare proxy
// and idemgate with the memory and Valkey stores: on every target each
// 1 MiB POST is answered 201 with the whole body echoed (on idemgate
// within the default 1 MiB limits) and none is a replay, and the report
// takes the rows. The bare proxy is held to it too: it streams the body
// full duplex (bareproxy's newHandler), without which it cut a few answers
// in a hundred on a loaded machine.
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
		if r.s.requests == 0 || r.s.errors != 0 || r.s.replayed != 0 || r.s.codes[201] != r.s.requests {
			t.Errorf("big on %s: %d requests, %d errors (first: %s), %d replays, codes %v", r.target.id, r.s.requests, r.s.errors, r.s.firstErr, r.s.replayed, r.s.codes)
		}
	}
	if md := rep.markdown(); len(md) == 0 {
		t.Error("empty report")
	}
}
