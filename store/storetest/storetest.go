// Package storetest checks that a store.Store keeps every rule of the store contract, one subtest per behaviour.
//
// This file holds the harness and the list of subtests; the subtests live
// in one file per behaviour group:
//
//   - claim.go: claiming a free, running or completed record, concurrent
//     and repeated claims, a peer sharing records (rule 1)
//   - times.go: lease and retention ends, the exact end <= now boundary,
//     retention 0, the expiry of running records, one clock (rules 2, 4, 6)
//   - holder.go: only the token holder acts; takeover; Extend (rule 3)
//   - roundtrip.go: identities, responses and recipes come back as given;
//     Get and Delete (rule 7)
//   - watch.go: Watch, in this process and from a peer (rule 8)
//   - failures.go: done contexts and Ping (rule 5); invalid parameters
//   - sweep.go: the optional store.Sweeper
//   - helpers.go: the calls and checks every subtest shares
//   - clock.go: the injectable Clock
//   - bench.go: benchmarks every driver runs
package storetest

import (
	"testing"

	"github.com/idemgate/idemgate/store"
)

// Harness describes the store under test.
//
// With a real clock (Clock nil) the suite uses short real leases (100-300
// ms) and only ever sleeps to make time pass, never to hope something has
// not happened yet; the exact end <= now boundary is checked only with an
// injected Clock.
type Harness struct {
	// NewStore returns a fresh, empty store for one subtest; the harness
	// closes it in t.Cleanup. Required.
	NewStore func(t *testing.T) store.Store
	// NewPeer returns a second store instance sharing s's backing server and
	// namespace, as another idemgate process would (closed in t.Cleanup).
	// Nil when the implementation is not shared between instances; the
	// cross-instance subtests then skip with a message.
	NewPeer func(t *testing.T, s store.Store) store.Store
	// Clock is the injected clock the stores from NewStore read. Nil means
	// the store uses a real clock (e.g. the Valkey server's).
	Clock *Clock
}

// Run checks newStore's stores against the whole contract with a real clock
// and no second instance.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	RunHarness(t, Harness{NewStore: newStore})
}

// RunHarness checks the stores of h against the whole contract.
func RunHarness(t *testing.T, h Harness) {
	if h.NewStore == nil {
		t.Fatal("storetest: Harness.NewStore is nil")
	}
	s := &suite{h: h}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"ClaimFree", s.testClaimFree},
		{"ConcurrentClaims", s.testConcurrentClaims},
		{"RunningAndCompletedAnswers", s.testRunningAndCompleted},
		{"RepeatedClaimSameToken", s.testRepeatedClaimSameToken},
		{"RepeatedClaimRefreshesLease", s.testRepeatedClaimRefreshesLease},
		{"RetentionEndIsAbsent", s.testRetentionEnd},
		{"RunningExpiryIsAbsent", s.testRunningExpiry},
		{"ExactBoundary", s.testExactBoundary},
		{"StaleToken", s.testStaleToken},
		{"Takeover", s.testTakeover},
		{"HolderActsPastLease", s.testHolderPastLease},
		{"ExtendKeepsRecord", s.testExtend},
		{"OneClock", s.testOneClock},
		{"DoneContext", s.testDoneContext},
		{"InvalidParams", s.testInvalidParams},
		{"Sweep", s.testSweep},
		{"RetentionZero", s.testRetentionZero},
		{"RunningAlwaysExpires", s.testRunningAlwaysExpires},
		{"RoundTripIdentity", s.testRoundTripIdentity},
		{"RoundTripResponse", s.testRoundTripResponse},
		{"RoundTripRecipe", s.testRoundTripRecipe},
		{"CopiesInAndOut", s.testCopies},
		{"GetAndDelete", s.testGetDelete},
		{"WatchWokenByComplete", func(t *testing.T) { s.testWatch(t, "complete", false) }},
		{"WatchWokenByRelease", func(t *testing.T) { s.testWatch(t, "release", false) }},
		{"WatchWokenByDelete", func(t *testing.T) { s.testWatch(t, "delete", false) }},
		{"WatchNotWokenByOthers", s.testWatchOthers},
		{"WatchStop", s.testWatchStop},
		{"PeerWatchWokenByComplete", func(t *testing.T) { s.testWatch(t, "complete", true) }},
		{"PeerWatchWokenByRelease", func(t *testing.T) { s.testWatch(t, "release", true) }},
		{"PeerWatchWokenByDelete", func(t *testing.T) { s.testWatch(t, "delete", true) }},
		{"PeerSharesRecords", s.testPeerShares},
		{"Ping", s.testPing},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct{ h Harness }
