//go:build race

package proxy_test

// hotPathCeilings are the ceilings of allocs_race_off_test.go under the
// race detector, which makes sync.Pool drop a random share of what is
// put back: more allocations, and a mean that moves by a few between
// runs, hence the margin above the figures measured. Raised together
// with allocs_race_off_test.go.
var hotPathCeilings = []ceiling{
	{path: "fresh", memory: 251 + raceMargin, valkey: 274 + raceMargin},
	{path: "replay", memory: 119 + raceMargin, valkey: 111 + raceMargin},
	{path: "passthrough", memory: 234 + raceMargin, valkey: 234 + raceMargin},
	{path: "mismatch422", memory: 129 + raceMargin, valkey: 121 + raceMargin},
	{path: "waitReplay", memory: 419 + raceMargin, valkey: 573 + raceMargin},
}

// raceMargin is the spread of the race detector's means over repeated
// runs (1 to 2 allocations), with room to spare.
const raceMargin = 5

// ceilingSlack: with the race detector the figures are a mean that moves,
// so only the ceiling is asserted.
const ceilingSlack = 1e9
