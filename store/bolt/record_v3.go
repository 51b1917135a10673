package bolt

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
)

// Flag bits of byte 2 of a version 3 record value beyond those of version 2
// (flagTakeover .. flagTrailerSet keep their meaning).
const (
	// flagBodyZstd: the body is a zstd frame of layout.BodyCodec.
	flagBodyZstd byte = 1 << 5
	// flagFingerprintPacked: the fingerprint field holds the 32 bytes that
	// fingerprintPrefix + their 64 lowercase hex digits spell.
	flagFingerprintPacked byte = 1 << 6
	knownFlagsV3               = flagTakeover | flagOmitted | flagHeaderSet | flagBodySet | flagTrailerSet | flagBodyZstd | flagFingerprintPacked
)

// fingerprintPrefix is the prefix of an hs1 fingerprint (fingerprint.Prefix;
// docs/protocol.md, "Request fingerprint (hs1)"), whose hex digest version
// 3 stores as bytes.
const fingerprintPrefix = "hs1:"

// fixedLenV3 is the fixed part of a version 3 record value: version, state,
// flags and expiry_ms (8 bytes big-endian, at expiryOffsetV3, so the sweep
// and every write read it without decoding the rest).
const fixedLenV3 = 3 + 8

// expiryOffsetV3 is where expiry_ms starts in a version 3 record value.
const expiryOffsetV3 = 3

// storedExpiry returns the expiry_ms of a stored record value of any
// version this build reads, without decoding the rest; ok is false when v
// is too short to hold one.
func storedExpiry(v []byte) (ms int64, raw []byte, ok bool) {
	off, min := expiryOffset, fixedLen
	if len(v) > 0 && v[0] == FormatVersion {
		off, min = expiryOffsetV3, fixedLenV3
	}
	if len(v) < min {
		return 0, nil, false
	}
	raw = v[off : off+8]
	return int64(binary.BigEndian.Uint64(raw)), raw, true
}

// packFingerprint returns the 32 bytes of an hs1 fingerprint written the
// one way policy writes it ("hs1:" + 64 lowercase hex digits), and false
// for any other string, which version 3 then stores as it is.
func packFingerprint(fp string) ([]byte, bool) {
	digits, ok := strings.CutPrefix(fp, fingerprintPrefix)
	if !ok || len(digits) != 64 {
		return nil, false
	}
	b, err := hex.DecodeString(digits)
	if err != nil || hex.EncodeToString(b) != digits {
		return nil, false
	}
	return b, true
}

// encodeRecord serializes r in format version 3 (docs/protocol.md, "Record
// value (version 3)"), the response body compressed by codec when that
// pays (layout.BodyCodec.Compress).
func encodeRecord(r *record, codec *layout.BodyCodec) ([]byte, error) {
	var (
		header, trailer, body []byte
		status                int
		flags                 byte
	)
	if r.Takeover {
		flags |= flagTakeover
	}
	fp := []byte(r.Fingerprint)
	if packed, ok := packFingerprint(r.Fingerprint); ok {
		fp = packed
		flags |= flagFingerprintPacked
	}
	state := stateRunning
	switch {
	case r.Gone:
		state = stateGone
	case !r.Running:
		state = stateCompleted
		if r.Resp == nil {
			return nil, errors.New("completed record without response")
		}
		if r.Resp.Status < 0 || r.Resp.Status > math.MaxUint16 {
			return nil, fmt.Errorf("response status %d out of range", r.Resp.Status)
		}
		status = r.Resp.Status
		if r.Resp.Omitted {
			flags |= flagOmitted
		}
		if r.Resp.Header != nil {
			flags |= flagHeaderSet
			header = layout.BoltV3Header.Encode(r.Resp.Header)
		}
		if len(r.Resp.Trailer) > 0 {
			flags |= flagTrailerSet
			trailer = layout.BoltV3Header.Encode(r.Resp.Trailer)
		}
		if r.Resp.Body != nil {
			flags |= flagBodySet
			var z bool
			if body, z = codec.Compress(r.Resp.Header, r.Resp.Body); z {
				flags |= flagBodyZstd
			}
		}
	}
	fields := [][]byte{[]byte(r.ID.Owner), []byte(r.ID.Scope), []byte(r.ID.Key), fp, []byte(r.Token), []byte(r.Recipe)}
	if flags&flagHeaderSet != 0 {
		fields = append(fields, header)
	}
	if flags&flagTrailerSet != 0 {
		fields = append(fields, trailer)
	}
	size := fixedLenV3 + 5*binary.MaxVarintLen64 + len(body)
	for _, f := range fields {
		size += binary.MaxVarintLen64 + len(f)
	}
	b := make([]byte, 0, size)
	b = append(b, FormatVersion, state, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(r.ExpiryMs))
	for _, v := range []int64{r.CreatedMs, r.LeaseEndMs, r.RetentionMs, r.StoredAtMs} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(status))
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return append(b, body...), nil
}

// decodeRecord parses a record value of any version this build reads (1 to
// 3), decompressing a version 3 body with codec; it copies everything out
// of b, which bbolt only lends for the length of the transaction.
func decodeRecord(b []byte, codec *layout.BodyCodec) (*record, error) {
	if len(b) > 0 && b[0] != FormatVersion {
		return decodeRecordV2(b)
	}
	if len(b) < fixedLenV3 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte fixed part", errCorrupt, len(b), fixedLenV3)
	}
	state, flags := b[1], b[2]
	if state != stateRunning && state != stateCompleted && state != stateGone {
		return nil, fmt.Errorf("%w: unknown state %d", errCorrupt, state)
	}
	if flags&^knownFlagsV3 != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", errCorrupt, flags)
	}
	r := &record{
		Running:  state == stateRunning,
		Gone:     state == stateGone,
		Takeover: flags&flagTakeover != 0,
		ExpiryMs: int64(binary.BigEndian.Uint64(b[expiryOffsetV3:])),
	}
	rest := b[fixedLenV3:]
	for _, p := range []*int64{&r.CreatedMs, &r.LeaseEndMs, &r.RetentionMs, &r.StoredAtMs} {
		v, n := binary.Varint(rest)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad time varint", errCorrupt)
		}
		*p, rest = v, rest[n:]
	}
	status, n := binary.Uvarint(rest)
	if n <= 0 || status > math.MaxUint16 {
		return nil, fmt.Errorf("%w: bad status", errCorrupt)
	}
	rest = rest[n:]
	field := func(i int) ([]byte, error) {
		l, n := binary.Uvarint(rest)
		if n <= 0 {
			return nil, fmt.Errorf("%w: truncated at field %d", errCorrupt, i)
		}
		rest = rest[n:]
		if uint64(len(rest)) < l {
			return nil, fmt.Errorf("%w: field %d of %d bytes truncated", errCorrupt, i, l)
		}
		f := rest[:l]
		rest = rest[l:]
		return f, nil
	}
	var fields [6][]byte
	for i := range fields {
		f, err := field(i)
		if err != nil {
			return nil, err
		}
		fields[i] = f
	}
	r.ID = store.Identity{Owner: string(fields[0]), Scope: string(fields[1]), Key: string(fields[2])}
	r.Fingerprint, r.Token, r.Recipe = string(fields[3]), string(fields[4]), string(fields[5])
	if flags&flagFingerprintPacked != 0 {
		if len(fields[3]) != 32 {
			return nil, fmt.Errorf("%w: packed fingerprint of %d bytes", errCorrupt, len(fields[3]))
		}
		r.Fingerprint = fingerprintPrefix + hex.EncodeToString(fields[3])
	}
	var header, trailer []byte
	if flags&flagHeaderSet != 0 {
		f, err := field(6)
		if err != nil {
			return nil, err
		}
		header = f
	}
	if flags&flagTrailerSet != 0 {
		f, err := field(7)
		if err != nil {
			return nil, err
		}
		trailer = f
	}
	if flags&flagBodySet == 0 && len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(rest))
	}
	if flags&flagBodyZstd != 0 && flags&flagBodySet == 0 {
		return nil, fmt.Errorf("%w: compressed flag without body", errCorrupt)
	}
	if r.Running || r.Gone {
		if flags&(flagOmitted|flagHeaderSet|flagBodySet|flagTrailerSet) != 0 || status != 0 {
			return nil, fmt.Errorf("%w: response fields on a record that is not completed", errCorrupt)
		}
		return r, nil
	}
	resp := &store.Response{Status: int(status), Omitted: flags&flagOmitted != 0, StoredAt: rules.Time(r.StoredAtMs)}
	var err error
	if header != nil {
		if resp.Header, err = layout.BoltV3Header.Decode(header); err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
	}
	if trailer != nil {
		if resp.Trailer, err = layout.BoltV3Header.Decode(trailer); err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
		if len(resp.Trailer) == 0 {
			// encodeRecord flags trailers only when there are some.
			return nil, fmt.Errorf("%w: empty trailers flagged", errCorrupt)
		}
	}
	if flags&flagBodySet != 0 {
		if flags&flagBodyZstd != 0 {
			if resp.Body, err = codec.Decompress(rest); err != nil {
				return nil, fmt.Errorf("%w: %w", errCorrupt, err)
			}
		} else {
			resp.Body = append([]byte{}, rest...)
		}
	}
	r.Resp = resp
	return r, nil
}
