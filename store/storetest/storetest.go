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
//   - tombstone.go: the resource index and tombstones (rules 9 to 13)
//   - helpers.go: the calls and checks every subtest shares
//   - clock.go: the injectable Clock
//   - bench.go: benchmarks every driver runs
//
// instrumented_test.go runs the suite through the metrics and tracing
// wrappers of the store (metrics.InstrumentStore, tracing.InstrumentStore).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Harness describes the store under test.
//
// Every subtest runs in parallel with the others (t.Parallel), on a store
// of its own and, with an injected clock, on a Clock of its own, as river
// runs each driver subtest on a schema of its own. With a real clock
// (ClockStart zero) the suite uses short real leases (100-300 ms) and only
// ever sleeps to make time pass, never to hope something has not happened
// yet; the exact end <= now boundary is checked only with an injected
// clock.
type Harness struct {
	// NewStore returns a fresh, empty store for one subtest; the harness
	// closes it in t.Cleanup. With ClockStart set, clock is the subtest's
	// own clock and the store must read it (and nothing else); on a real
	// clock it is nil. Required.
	NewStore func(t *testing.T, clock *Clock) store.Store
	// NewPeer returns a second store instance sharing s's backing server and
	// namespace, as another idemgate process would (closed in t.Cleanup),
	// reading the same clock as s. Nil when the implementation is not
	// shared between instances; the cross-instance subtests then skip with
	// a message.
	NewPeer func(t *testing.T, s store.Store, clock *Clock) store.Store
	// ClockStart, when not zero, gives every subtest an injected Clock
	// reading ClockStart until the subtest advances it. Zero means the
	// stores use a real clock (e.g. the Valkey server's).
	ClockStart time.Time
	// Context, when set, derives the context of every store call the suite
	// makes, e.g. to give it a span so a tracing wrapper traces the call.
	Context func(context.Context) context.Context
}

// Run checks newStore's stores against the whole contract with a real clock
// and no second instance.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	RunHarness(t, Harness{NewStore: func(t *testing.T, _ *Clock) store.Store { return newStore(t) }})
}

// RunHarness checks the stores of h against the whole contract, one
// parallel subtest per behaviour. The subtests run after the calling test
// function returns (t.Parallel), so checks that must follow the whole
// suite belong in t.Cleanup.
func RunHarness(t *testing.T, h Harness) {
	if h.NewStore == nil {
		t.Fatal("storetest: Harness.NewStore is nil")
	}
	watch := func(by string, peer bool) func(*suite, *testing.T) {
		return func(s *suite, t *testing.T) { s.testWatch(t, by, peer) }
	}
	tests := []struct {
		name string
		fn   func(*suite, *testing.T)
	}{
		{"ClaimFree", (*suite).testClaimFree},
		{"ConcurrentClaims", (*suite).testConcurrentClaims},
		{"RunningAndCompletedAnswers", (*suite).testRunningAndCompleted},
		{"RepeatedClaimSameToken", (*suite).testRepeatedClaimSameToken},
		{"RepeatedClaimRefreshesLease", (*suite).testRepeatedClaimRefreshesLease},
		{"RetentionEndIsAbsent", (*suite).testRetentionEnd},
		{"RunningExpiryIsAbsent", (*suite).testRunningExpiry},
		{"ExactBoundary", (*suite).testExactBoundary},
		{"StaleToken", (*suite).testStaleToken},
		{"Takeover", (*suite).testTakeover},
		{"HolderActsPastLease", (*suite).testHolderPastLease},
		{"ExtendKeepsRecord", (*suite).testExtend},
		{"OneClock", (*suite).testOneClock},
		{"DoneContext", (*suite).testDoneContext},
		{"InvalidParams", (*suite).testInvalidParams},
		{"Sweep", (*suite).testSweep},
		{"RetentionZero", (*suite).testRetentionZero},
		{"RunningAlwaysExpires", (*suite).testRunningAlwaysExpires},
		{"RoundTripIdentity", (*suite).testRoundTripIdentity},
		{"RoundTripResponse", (*suite).testRoundTripResponse},
		{"RoundTripRecipe", (*suite).testRoundTripRecipe},
		{"CopiesInAndOut", (*suite).testCopies},
		{"GetAndDelete", (*suite).testGetDelete},
		{"WatchWokenByComplete", watch("complete", false)},
		{"WatchWokenByRelease", watch("release", false)},
		{"WatchWokenByDelete", watch("delete", false)},
		{"WatchNotWokenByOthers", (*suite).testWatchOthers},
		{"WatchStop", (*suite).testWatchStop},
		{"PeerWatchWokenByComplete", watch("complete", true)},
		{"PeerWatchWokenByRelease", watch("release", true)},
		{"PeerWatchWokenByDelete", watch("delete", true)},
		{"PeerSharesRecords", (*suite).testPeerShares},
		{"Ping", (*suite).testPing},
		{"Tombstone", (*suite).testTombstone},
		{"TombstoneIsolation", (*suite).testTombstoneIsolation},
		{"TombstoneNotIndexed", (*suite).testTombstoneNotIndexed},
		{"TombstoneExpires", (*suite).testTombstoneExpires},
		{"TombstonePeer", (*suite).testTombstonePeer},
		{"TombstoneDoneContext", (*suite).testTombstoneDoneContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &suite{h: h}
			if !h.ClockStart.IsZero() {
				s.clock = NewClock(h.ClockStart)
			}
			tc.fn(s, t)
		})
	}
}

// suite is one subtest's view of the harness: its own clock (nil on a
// real clock).
type suite struct {
	h     Harness
	clock *Clock
}
