//go:build !race

package proxy_test

// hotPathCeilings are the allocation ceilings of
// TestHotPathAllocationCeilings, per exchange (client, idemgate and
// upstream together), without the race detector: exact figures, the same
// on every run and machine for one Go release: Go 1.27.3's, the Go
// scripts/test.sh builds with (1.26.8 made one fewer for a 422 and one
// more for a passthrough). A change that adds allocations to one of
// these paths raises its ceiling here, and in allocs_race_on_test.go, in
// the same commit, and says why in the message.
var hotPathCeilings = []ceiling{
	{path: "fresh", memory: 235, valkey: 256},
	{path: "replay", memory: 110, valkey: 102},
	{path: "passthrough", memory: 217, valkey: 217},
	{path: "mismatch422", memory: 118, valkey: 110},
	{path: "waitReplay", memory: 394, valkey: 542},
}

// ceilingSlack is how far under its ceiling a path may fall before the
// test asks for the ceiling to come down: one allocation, because on
// Valkey a call that valkey-go queues behind another's now and then takes
// a path with one allocation fewer (mismatch422 read 123 against 124 once
// in a run), and a gain of one is not worth a red run.
const ceilingSlack = 1
