// Record values of format versions 1 and 2 (docs/protocol.md, "Store
// records (bolt)"): fixed 8-byte times and 4-byte lengths. This build
// only reads them; it writes version 3 (record_v3.go).

package bolt

import (
	"encoding/binary"
	"fmt"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
)

// fixedLen is the size in bytes of the fixed part of a version 1 or 2
// record value, before the length-prefixed fields.
const fixedLen = 1 + 1 + 1 + 5*8 + 2

// expiryOffset is where expiry_ms starts in a version 1 or 2 record value;
// the sweep reads it without decoding the rest (storedExpiry).
const expiryOffset = 3 + 2*8

// decodeRecordV2 parses a record value of format version 1 or 2; it copies
// everything out of b, which bbolt only lends for the length of the
// transaction.
func decodeRecordV2(b []byte) (*record, error) {
	if len(b) < fixedLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte fixed part", errCorrupt, len(b), fixedLen)
	}
	nfields := 8
	switch b[0] {
	case formatV2:
	case formatV1:
		nfields = 7
	default:
		return nil, fmt.Errorf("%w: format version %d, this build reads %d to %d", errCorrupt, b[0], formatV1, FormatVersion)
	}
	state, flags := b[1], b[2]
	if b[0] == formatV2 && flags&flagTrailerSet != 0 {
		nfields = 9
	}
	if state != stateRunning && state != stateCompleted && state != stateGone {
		return nil, fmt.Errorf("%w: unknown state %d", errCorrupt, state)
	}
	times := make([]int64, 5)
	for i := range times {
		times[i] = int64(binary.BigEndian.Uint64(b[3+8*i:]))
	}
	status := int(binary.BigEndian.Uint16(b[3+5*8:]))
	rest := b[fixedLen:]
	fields := make([][]byte, nfields)
	for i := range fields {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: truncated at field %d", errCorrupt, i)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(len(rest)) < uint64(n) {
			return nil, fmt.Errorf("%w: field %d of %d bytes truncated", errCorrupt, i, n)
		}
		fields[i], rest = rest[:n], rest[n:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(rest))
	}
	r := &record{
		ID:          store.Identity{Owner: string(fields[0]), Scope: string(fields[1]), Key: string(fields[2])},
		Running:     state == stateRunning,
		Gone:        state == stateGone,
		Takeover:    flags&flagTakeover != 0,
		Fingerprint: string(fields[3]),
		Token:       string(fields[4]),
		CreatedMs:   times[0],
		LeaseEndMs:  times[1],
		ExpiryMs:    times[2],
		RetentionMs: times[3],
		StoredAtMs:  times[4],
	}
	if nfields >= 8 {
		r.Recipe = string(fields[7])
	}
	if r.Running || r.Gone {
		return r, nil
	}
	resp := &store.Response{Status: status, Omitted: flags&flagOmitted != 0, StoredAt: rules.Time(r.StoredAtMs)}
	if flags&flagHeaderSet != 0 {
		h, err := layout.BoltV2Header.Decode(fields[5])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
		resp.Header = h
	}
	if flags&flagBodySet != 0 {
		resp.Body = append([]byte{}, fields[6]...)
	}
	if nfields == 9 {
		t, err := layout.BoltV2Header.Decode(fields[8])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
		if len(t) > 0 {
			// An empty trailer field is no trailers, as version 3 stores it.
			resp.Trailer = t
		}
	}
	r.Resp = resp
	return r, nil
}
