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
	clock := storetest.NewClock(time.Date(2025, 1, 2, 3, 4, 5, 678_900_000, time.UTC))
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T) store.Store { return memory.New(memory.WithClock(clock.Now)) },
		Clock:    clock,
	})
}

func TestContractRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
}

func TestSweepRemovesExpiredRecords(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	for i, retention := range []time.Duration{time.Second, 0} {
		id := store.Identity{Owner: "o", Scope: "r", Key: string(rune('a' + i))}
		p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: retention}
		if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim: %+v %v", res, err)
		}
		if ok, err := s.Complete(ctx, id, "t", store.Response{Status: 200}); !ok || err != nil {
			t.Fatalf("Complete: %v %v", ok, err)
		}
	}
	// An abandoned claim with retention 0 goes a day after its lease end.
	abandoned := store.ClaimParams{Identity: store.Identity{Key: "abandoned"}, Fingerprint: "fp", Token: "t", Lease: time.Second}
	if _, err := s.Claim(ctx, abandoned); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if got := s.Sweep(); got != 1 || s.Len() != 2 {
		t.Fatalf("Sweep removed %d, %d left; want 1 removed (retention 1s), 2 left", got, s.Len())
	}
	clock.Advance(24 * time.Hour)
	if got := s.Sweep(); got != 1 || s.Len() != 1 {
		t.Fatalf("Sweep removed %d, %d left; want the abandoned claim removed, the retention-0 record kept", got, s.Len())
	}
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
