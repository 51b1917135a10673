package layout

import (
	"bytes"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// TestIdentityBytes pins the encoding every store hashes into its record
// key (docs/protocol.md, "Key layout"): a change would orphan every record.
func TestIdentityBytes(t *testing.T) {
	want := []byte("\x00\x00\x00\x00\x00\x00\x00\x05alice\x00\x00\x00\x00\x00\x00\x00\x0cPOST /orders\x00\x00\x00\x00\x00\x00\x00\x02k1")
	if got := IdentityBytes(store.Identity{Owner: "alice", Scope: "POST /orders", Key: "k1"}); !bytes.Equal(got, want) {
		t.Fatalf("IdentityBytes = %q, want %q", got, want)
	}
	if got := ResourceBytes(store.Resource{Owner: "alice", Scope: "POST /orders", Path: "k1"}); !bytes.Equal(got, want) {
		t.Fatalf("ResourceBytes = %q, want the identity encoding with Path in the key's place", got)
	}
}
