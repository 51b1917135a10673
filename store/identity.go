package store

import "encoding/binary"

// Bytes is the unambiguous encoding of id that every store hashes into its
// record key (docs/protocol.md, "Key layout"): for Owner, Scope and Key in
// that order, the field's length in bytes as an 8-byte big-endian unsigned
// integer followed by the field's bytes. No choice of fields can shift a
// boundary, so distinct identities never share an encoding.
func (id Identity) Bytes() []byte {
	b := make([]byte, 0, 24+len(id.Owner)+len(id.Scope)+len(id.Key))
	for _, f := range []string{id.Owner, id.Scope, id.Key} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// Bytes is the encoding of res that the stores hash into its resource
// index key: Identity.Bytes with Path in the key's place.
func (res Resource) Bytes() []byte {
	return Identity{Owner: res.Owner, Scope: res.Scope, Key: res.Path}.Bytes()
}
