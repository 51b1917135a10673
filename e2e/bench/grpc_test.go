package main

import (
	"strings"
	"testing"
	"time"
)

// TestGRPCSmoke runs the gRPC workload briefly: no call fails, every call
// of the replay phase is a replay and none of the others is, and the
// table is in the report.
func TestGRPCSmoke(t *testing.T) {
	o := options{
		duration: 300 * time.Millisecond, rounds: 1, concurrency: 8,
		workloads: []string{wGRPC}, targets: "A", logLevel: "info",
	}
	rep := runBrief(t, o)
	if len(rep.grpc) != 4 {
		t.Fatalf("%d gRPC phases, want 4", len(rep.grpc))
	}
	for _, g := range rep.grpc {
		s := g.row.s
		if s.requests == 0 || s.errors != 0 {
			t.Errorf("%s: %d calls, %d errors (first: %s)", g.mode, s.requests, s.errors, s.firstErr)
		}
		if (g.mode == "replay") != (s.replayed == s.requests) || (g.mode != "replay" && s.replayed != 0) {
			t.Errorf("%s: %d of %d calls were replays", g.mode, s.replayed, s.requests)
		}
	}
	if !strings.Contains(rep.markdown(), "### gRPC unary calls") {
		t.Error("no gRPC table in the report")
	}
}
