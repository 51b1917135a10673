//go:build !race

package middleware_test

// middlewareCeilings are the ceilings of TestMiddlewareAllocationCeilings
// without the race detector: exact figures for one Go release (Go
// 1.27.3's, the Go scripts/test.sh builds with). Raised only together
// with allocs_race_on_test.go, in the commit that adds the allocations,
// which says why.
var middlewareCeilings = []allocCeiling{
	{path: "fresh", memory: 146, valkey: 167},
	{path: "replay", memory: 109, valkey: 101},
	{path: "passthrough", memory: 92, valkey: 92},
}

// ceilingSlack is how far under its ceiling a path may fall before the
// test asks for the ceiling to come down: one allocation, because on
// Valkey a call that valkey-go queues behind another's now and then takes
// a path with one allocation fewer (mismatch422 read 123 against 124 once
// in a run), and a gain of one is not worth a red run.
const ceilingSlack = 1
