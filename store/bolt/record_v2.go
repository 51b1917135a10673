// Record values of format versions 1 and 2 (docs/protocol.md, "Store
// records (bolt)"): fixed 8-byte times and 4-byte lengths. This build
// only reads them; it writes version 3 (record_v3.go).

package bolt

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/store"
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
		h, err := decodeHeader(fields[5])
		if err != nil {
			return nil, err
		}
		resp.Header = h
	}
	if flags&flagBodySet != 0 {
		resp.Body = append([]byte{}, fields[6]...)
	}
	if nfields == 9 {
		t, err := decodeHeader(fields[8])
		if err != nil {
			return nil, err
		}
		if len(t) > 0 {
			// An empty trailer field is no trailers, as version 3 stores it.
			resp.Trailer = t
		}
	}
	r.Resp = resp
	return r, nil
}

// encodeHeader serializes h keeping every name exactly as in the map (not
// canonicalized), the order of each name's values, and names with no
// values: the name count as a 4-byte big-endian unsigned integer, then for
// each name in byte order its length (4 bytes) and bytes, its value count
// (4 bytes), and each value's length (4 bytes) and bytes.
func encodeHeader(h http.Header) ([]byte, error) {
	names := make([]string, 0, len(h))
	size := 4
	for name, vals := range h {
		names = append(names, name)
		size += 8 + len(name)
		for _, v := range vals {
			size += 4 + len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, name := range names {
		vals := h[name]
		b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
		b = append(b, name...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
		for _, v := range vals {
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	if uint64(len(b)) > math.MaxUint32 {
		return nil, fmt.Errorf("response header of %d bytes exceeds 4 GiB", len(b))
	}
	return b, nil
}

// decodeHeader reverses encodeHeader into a fresh map.
func decodeHeader(b []byte) (http.Header, error) {
	u32 := func() (uint32, error) {
		if len(b) < 4 {
			return 0, fmt.Errorf("%w: header truncated", errCorrupt)
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		return n, nil
	}
	str := func() (string, error) {
		n, err := u32()
		if err != nil {
			return "", err
		}
		if uint64(len(b)) < uint64(n) {
			return "", fmt.Errorf("%w: header truncated", errCorrupt)
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	count, err := u32()
	if err != nil {
		return nil, err
	}
	// Every name takes at least 8 bytes, which bounds the map size hint.
	h := make(http.Header, min(int(count), len(b)/8))
	for range count {
		name, err := str()
		if err != nil {
			return nil, err
		}
		nvals, err := u32()
		if err != nil {
			return nil, err
		}
		vals := make([]string, 0, min(int(nvals), len(b)/4))
		for range nvals {
			v, err := str()
			if err != nil {
				return nil, err
			}
			vals = append(vals, v)
		}
		h[name] = vals
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing header bytes", errCorrupt, len(b))
	}
	return h, nil
}
