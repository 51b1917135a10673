//go:build race

package proxy_test

// hotPathCeilings are the ceilings of allocs_race_off_test.go under the
// race detector, which makes sync.Pool drop a random share of what is
// put back: more allocations, and a mean that moves by a few between
// runs, hence the margin above the figures measured. Raised together
// with allocs_race_off_test.go.
var hotPathCeilings = []ceiling{
	{path: "fresh", memory: 257 + raceMargin, valkey: 280 + raceMargin},
	{path: "replay", memory: 123 + raceMargin, valkey: 120 + raceMargin},
	{path: "passthrough", memory: 236 + raceMargin, valkey: 236 + raceMargin},
	{path: "mismatch422", memory: 132 + raceMargin, valkey: 129 + raceMargin},
	{path: "waitReplay", memory: 429 + raceMargin, valkey: 579 + raceMargin},
}

// raceMargin is the spread of the race detector's means over repeated
// runs (1 to 2 allocations), with room to spare.
const raceMargin = 5

// ceilingSlack: with the race detector the figures are a mean that moves,
// so only the ceiling is asserted.
const ceilingSlack = 1e9
