package gatetest

import (
	"testing"
	"time"
)

func TestUntilTrueAtOnce(t *testing.T) {
	calls := 0
	if !Until(time.Hour, func() bool { calls++; return true }) || calls != 1 {
		t.Fatalf("Until on a true condition: %d calls, want 1 and true", calls)
	}
}

func TestUntilBecomesTrue(t *testing.T) {
	calls := 0
	if !Until(10*time.Second, func() bool { calls++; return calls == 4 }) {
		t.Fatal("Until gave up on a condition that became true")
	}
}

// TestUntilGivesUpAfterD: a condition never true is looked at again after
// d has passed, then Until reports false.
func TestUntilGivesUpAfterD(t *testing.T) {
	const d = 50 * time.Millisecond
	start := time.Now()
	var last time.Time
	if Until(d, func() bool { last = time.Now(); return false }) {
		t.Fatal("Until reported true for a condition never true")
	}
	if last.Sub(start) < d {
		t.Fatalf("last look %v after the start, want at least %v", last.Sub(start), d)
	}
}
