//go:build !race

package proxy_test

// hotPathCeilings are the allocation ceilings of
// TestHotPathAllocationCeilings, per exchange (client, idemgate and
// upstream together), without the race detector: exact figures, the same
// on every run and machine. A change that adds allocations to one of
// these paths raises its ceiling here, and in allocs_race_on_test.go, in
// the same commit, and says why in the message.
var hotPathCeilings = []ceiling{
	{path: "fresh", memory: 263, valkey: 296},
	{path: "replay", memory: 126, valkey: 126},
	{path: "passthrough", memory: 217, valkey: 217},
	{path: "mismatch422", memory: 131, valkey: 131},
	{path: "waitReplay", memory: 438, valkey: 617},
}

// ceilingSlack is how far under its ceiling a path may fall before the
// test asks for the ceiling to come down: none, the counts are exact.
const ceilingSlack = 0
