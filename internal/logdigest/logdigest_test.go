package logdigest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
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

// TestOfIdentityNamesOneOperation: the digest README documents for
// key_hash covers owner, scope and key, pinned on a known input, and two
// identities that differ only in where one field ends and the next begins
// get different digests.
func TestOfIdentityNamesOneOperation(t *testing.T) {
	sum := sha256.Sum256([]byte("5:alice11:example.comk1"))
	if got, want := logdigest.OfIdentity("alice", "example.com", "k1"), hex.EncodeToString(sum[:])[:12]; got != want {
		t.Errorf("OfIdentity = %q, want %q", got, want)
	}
	if logdigest.OfIdentity("alice", "", "k1") == logdigest.OfIdentity("bob", "", "k1") {
		t.Error("two owners of one key share a digest")
	}
	if logdigest.OfIdentity("a", "b", "c") == logdigest.OfIdentity("", "ab", "c") || logdigest.OfIdentity("a", "bc", "") == logdigest.OfIdentity("a", "b", "c") {
		t.Error("field boundaries are not part of the digest")
	}
	long := strings.Repeat("x", 300)
	sum = sha256.Sum256([]byte("300:" + long + "0:" + long))
	if got, want := logdigest.OfIdentity(long, "", long), hex.EncodeToString(sum[:])[:12]; got != want {
		t.Errorf("OfIdentity of a long identity = %q, want %q", got, want)
	}
}
