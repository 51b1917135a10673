package valkeytest

import "testing"

// TestFreePortNeverRepeats: calls in a row return distinct ports, so one
// configuration can take two of them (a listen and an admin address),
// although the kernel may give a port just closed to the next bind.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
	}
}
