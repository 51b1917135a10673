package store

import (
	"bytes"
	"testing"
)

// TestIdentityBytes pins the encoding every store hashes into its record
// key (docs/protocol.md, "Key layout"): a change would orphan every record.
func TestIdentityBytes(t *testing.T) {
	want := []byte("\x00\x00\x00\x00\x00\x00\x00\x05alice\x00\x00\x00\x00\x00\x00\x00\x0cPOST /orders\x00\x00\x00\x00\x00\x00\x00\x02k1")
	if got := (Identity{Owner: "alice", Scope: "POST /orders", Key: "k1"}).Bytes(); !bytes.Equal(got, want) {
		t.Fatalf("Identity.Bytes = %q, want %q", got, want)
	}
	if got := (Resource{Owner: "alice", Scope: "POST /orders", Path: "k1"}).Bytes(); !bytes.Equal(got, want) {
		t.Fatalf("Resource.Bytes = %q, want the identity encoding with Path in the key's place", got)
	}
}
