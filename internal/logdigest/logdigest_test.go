package logdigest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/idemgate/idemgate/internal/logdigest"
)

// TestOfIsTheFirst12HexDigitsOfSHA256: the format README documents for
// key_hash and owner_hash, pinned on a known value so a change of it (which
// would break following an operation across old and new log lines) fails.
func TestOfIsTheFirst12HexDigitsOfSHA256(t *testing.T) {
	for _, s := range []string{"", "k1", "alice", "an idempotency key of some length"} {
		sum := sha256.Sum256([]byte(s))
		if got, want := logdigest.Of(s), hex.EncodeToString(sum[:])[:12]; got != want {
			t.Errorf("Of(%q) = %q, want %q", s, got, want)
		}
	}
	// sha256("") = e3b0c44298fc1c14...
	if got := logdigest.Of(""); got != "e3b0c44298fc" {
		t.Errorf(`Of("") = %q, want "e3b0c44298fc"`, got)
	}
}
