package memory_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/storetest"
)

func TestContractInjectedClock(t *testing.T) {
	// A start off the millisecond grid checks that the store truncates.
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, clock *storetest.Clock) store.Store {
			return memory.New(memory.WithClock(clock.Now))
		},
		ClockStart: time.Date(2025, 1, 2, 3, 4, 5, 678_900_000, time.UTC),
	})
}

func TestContractRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
}

func TestBackgroundSweepStopsOnClose(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(time.Millisecond))
	id := store.Identity{Key: "k"}
	if _, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("background sweep did not remove the expired record within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	s := memory.New()
	b.Cleanup(func() { _ = s.Close() })
	storetest.BenchmarkClaimComplete(b, s)
}

func BenchmarkClaimCompleted(b *testing.B) {
	s := memory.New()
	b.Cleanup(func() { _ = s.Close() })
	storetest.BenchmarkClaimCompleted(b, s)
}
