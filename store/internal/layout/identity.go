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
	return AppendIdentity(make([]byte, 0, 24+len(id.Owner)+len(id.Scope)+len(id.Key)), id)
}

// AppendIdentity appends IdentityBytes(id) to dst, so that a caller that
// only hashes them can keep them in a buffer of its own stack.
func AppendIdentity(dst []byte, id store.Identity) []byte {
	for _, f := range []string{id.Owner, id.Scope, id.Key} {
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(f)))
		dst = append(dst, f...)
	}
	return dst
}

// ResourceBytes is the encoding of res that the stores hash into its
// resource index key: IdentityBytes with Path in the key's place.
func ResourceBytes(res store.Resource) []byte {
	return IdentityBytes(store.Identity{Owner: res.Owner, Scope: res.Scope, Key: res.Path})
}
