// What every format version of a record value shares: the version
// byte, the states and flags, the record and expiry keys, and the decoded
// record. record_v2.go reads versions 1 and 2, record_v3.go reads and
// writes version 3.

package bolt

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
)

// FormatVersion is the first byte of every record value this build writes
// and the value of the "version" key in the meta bucket. A store refuses
// files and records written in any other version rather than guess at
// their meaning, except the earlier versions 1 and 2, which it still reads.
// Version 2 appends the fingerprint recipe to the fields of version 1;
// version 1 records (written before recipes) are still read, with no recipe.
// A version 2 record with flagTrailerSet carries one more field, the
// response trailer; records without it read as having none.
// Version 3 (docs/performance.md, "Record memory") is the compact encoding of
// record_v3.go: varint lengths and times, an hs1 fingerprint as its 32
// bytes, the body compressed by layout.BodyCodec when that pays.
const FormatVersion byte = 3

// formatV1 is the record format before recipes: seven length-prefixed fields.
const formatV1 byte = 1

// formatV2 is the record format before version 3: fixed 8-byte times and
// 4-byte lengths (encodeRecordV2).
const formatV2 byte = 2

// Record states as stored in byte 1 of a record value.
const (
	stateRunning   byte = 1
	stateCompleted byte = 2
	// stateGone is a tombstone (Store.Index and Store.Tombstone): the record keeps its
	// identity, created, expiry and retention, and no fingerprint, recipe,
	// token or response (status 0, no flags). A layout addition within
	// version 2: a build from before tombstones reports such a record as
	// corrupt and reads every other one.
	stateGone byte = 3
)

// Flag bits of byte 2 of a record value.
const (
	flagTakeover  byte = 1 << 0 // the running claim took over an abandoned one
	flagOmitted   byte = 1 << 1 // store.Response.Omitted
	flagHeaderSet byte = 1 << 2 // store.Response.Header was non-nil
	flagBodySet   byte = 1 << 3 // store.Response.Body was non-nil
	// flagTrailerSet: a ninth field holds store.Response.Trailer, which was
	// non-empty. Records without trailers keep the eight fields, so a build
	// from before trailers still reads every record that has none.
	flagTrailerSet byte = 1 << 4
)

// IdentityBytes is the encoding of id hashed into the record key, the one
// every store shares (docs/protocol.md, "Key layout").
func IdentityBytes(id store.Identity) []byte { return layout.IdentityBytes(id) }

// RecordKey returns the key of id's record in the records bucket: the
// 32-byte SHA-256 of IdentityBytes(id).
func RecordKey(id store.Identity) []byte {
	sum := sha256.Sum256(IdentityBytes(id))
	return sum[:]
}

// expiryKey is the key of a record's entry in the expiry bucket: expiry_ms
// as an 8-byte big-endian unsigned integer, then the 32-byte record key, so
// a cursor walks entries in expiry order.
func expiryKey(expiryMs int64, recordKey []byte) []byte {
	b := make([]byte, 0, 8+len(recordKey))
	b = binary.BigEndian.AppendUint64(b, uint64(expiryMs))
	return append(b, recordKey...)
}

// record is one decoded record value: the state the rule book of the
// local stores keeps (store/internal/rules), whatever format version it
// was read from. A version 1 record has no recipe.
type record = rules.Record

var errCorrupt = errors.New("corrupt record")
