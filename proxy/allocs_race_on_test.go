//go:build race

package proxy_test

// hotPathCeilings are the ceilings of allocs_race_off_test.go under the
// race detector, which makes sync.Pool drop a random share of what is
// put back: more allocations, and a mean that moves by a few between
// runs, hence the margin above the figures measured. Raised together
// with allocs_race_off_test.go.
var hotPathCeilings = []ceiling{
	{path: "fresh", memory: 256 + raceMargin, valkey: 279 + raceMargin},
	{path: "replay", memory: 122 + raceMargin, valkey: 119 + raceMargin},
	{path: "passthrough", memory: 236 + raceMargin, valkey: 236 + raceMargin},
	{path: "mismatch422", memory: 131 + raceMargin, valkey: 128 + raceMargin},
	{path: "waitReplay", memory: 427 + raceMargin, valkey: 577 + raceMargin},
}

// raceMargin is the spread of the race detector's means over repeated
// runs (1 to 2 allocations), with room to spare.
const raceMargin = 5

// ceilingSlack: with the race detector the figures are a mean that moves,
// so only the ceiling is asserted.
const ceilingSlack = 1e9
