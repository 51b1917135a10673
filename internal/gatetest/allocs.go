package gatetest

import "testing"

// HoldAllocs measures exchange (one whole request and its answer) with
// testing.AllocsPerRun over runs exchanges, after 20 that warm
// connections, pools and caches, and holds it to limit: over it fails t
// (a change added allocations to path on store: cut them, or raise the
// ceiling in the same commit and say why), and more than slack under it
// fails t too, so that a gain is kept by lowering the ceiling.
func HoldAllocs(t testing.TB, path, store string, limit, slack float64, runs int, exchange func()) {
	t.Helper()
	for range 20 {
		exchange()
	}
	got := testing.AllocsPerRun(runs, exchange)
	t.Logf("%s: %.0f allocations per exchange (ceiling %.0f)", path, got, limit)
	if got > limit {
		t.Errorf("%s on %s: %.0f allocations per exchange, over the ceiling of %.0f: a change added allocations to the path; cut them, or raise the ceiling in allocs_race_off_test.go and allocs_race_on_test.go in the same commit and say why", path, store, got, limit)
	}
	if got < limit-slack {
		t.Errorf("%s on %s: %.0f allocations per exchange, under the ceiling of %.0f: lower the ceiling to keep the gain", path, store, got, limit)
	}
}
