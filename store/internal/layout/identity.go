package layout

import (
	"encoding/binary"

	"github.com/idemgate/idemgate/store"
)

// IdentityBytes is the unambiguous encoding of id that every store hashes
// into its record key (docs/protocol.md, "Key layout"): for Owner, Scope
// and Key in that order, the field's length in bytes as an 8-byte
// big-endian unsigned integer followed by the field's bytes. No choice of
// fields can shift a boundary, so distinct identities never share an
// encoding.
func IdentityBytes(id store.Identity) []byte {
	b := make([]byte, 0, 24+len(id.Owner)+len(id.Scope)+len(id.Key))
	for _, f := range []string{id.Owner, id.Scope, id.Key} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// ResourceBytes is the encoding of res that the stores hash into its
// resource index key: IdentityBytes with Path in the key's place.
func ResourceBytes(res store.Resource) []byte {
	return IdentityBytes(store.Identity{Owner: res.Owner, Scope: res.Scope, Key: res.Path})
}
