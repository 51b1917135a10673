package layout

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/http"
	"slices"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Flag bits of the first byte of a stored response (docs/protocol.md,
// "Completed record (layout 3, Valkey)" and "The response column (layout
// 3)"): the response part of a Valkey layout 3 record and the Postgres
// response column are the same bytes.
const (
	RespOmitted    byte = 1 << 0 // Response.Omitted
	RespHeaderSet  byte = 1 << 1 // Header was non-nil: a header field follows
	RespBodySet    byte = 1 << 2 // Body was non-nil: the rest is the body
	RespTrailerSet byte = 1 << 3 // Trailer was non-empty: a trailer field follows
	RespBodyZstd   byte = 1 << 4 // the body is a zstd frame (BodyCodec)
	// RespChecked: the stored body's length and a CRC-32C follow the
	// trailer field (CheckLen bytes; StoredResponse.Sum), so a record cut
	// short or damaged is never replayed (TestParseResponseRejectsDamage).
	// Every response written since is checked; one without the flag (written
	// before) is read as before, unless a check follows its fields anyway
	// (lostCheck: the flag was lost, and the response is damaged).
	RespChecked byte = 1 << 5
	// RespKnownFlags are the bits this build reads; a stored response with
	// any other bit set is refused (a later layout read by this build).
	RespKnownFlags = RespOmitted | RespHeaderSet | RespBodySet | RespTrailerSet | RespBodyZstd | RespChecked
)

// CheckLen is the size of the check of a RespChecked response: the stored
// body's length and the CRC-32C (Castagnoli, RFC 3720 appendix B.4) of
// every byte before the check and of the stored body, each a 4-byte
// big-endian unsigned integer.
const CheckLen = 8

// maxChecked bounds the stored body a check can describe (its length is a
// uint32); a longer body is stored without the check.
const maxChecked = 1<<32 - 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StoredResponse is a stored response as its bytes hold it: the flags
// byte, the status as a uvarint, Header and Trailer each as a uvarint
// length and EncodeHeader bytes (when their flag is set), then Body to
// the end. Body stays as stored (a zstd frame when Flags has
// RespBodyZstd), so that ParseResponse and Append are exact inverses.
type StoredResponse struct {
	Flags           byte
	Status          uint64
	Header, Trailer []byte // EncodeHeader bytes
	Body            []byte
	// Sum is the CRC-32C of the check (RespChecked): of the bytes before
	// the check and of Body. seal computes it; ParseResponse reads and
	// verifies it.
	Sum uint32
}

// headOf is the StoredResponse of resp without its body: flags, status,
// header and trailer.
func headOf(resp store.Response) StoredResponse {
	r := StoredResponse{Status: uint64(resp.Status)}
	if resp.Omitted {
		r.Flags |= RespOmitted
	}
	if resp.Header != nil {
		r.Flags |= RespHeaderSet
		r.Header = EncodeHeader(resp.Header)
	}
	// Flagged only when a field is written: a trailer whose names carry
	// no value encodes to nothing, and a flagged empty field is refused
	// on read, so such a response was stored fine and never replayed.
	if t := EncodeHeader(resp.Trailer); len(t) > 0 {
		r.Flags |= RespTrailerSet
		r.Trailer = t
	}
	return r
}

// headLen bounds the length of AppendHead's bytes.
func (r *StoredResponse) headLen() int {
	return 1 + binary.MaxVarintLen64*3 + len(r.Header) + len(r.Trailer) + CheckLen
}

// checkSum is the CRC-32C a check carries: of fields (appendFields's
// bytes) and of the stored body.
func checkSum(fields, body []byte) uint32 {
	return crc32.Update(crc32.Checksum(fields, castagnoli), castagnoli, body)
}

// AppendHead appends r's bytes before the body to b: flags, status, and
// the header and trailer fields their flags announce.
func (r *StoredResponse) AppendHead(b []byte) []byte {
	b = r.appendFields(b)
	if r.Flags&RespChecked != 0 {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Body)))
		b = binary.BigEndian.AppendUint32(b, r.Sum)
	}
	return b
}

// appendFields appends the head without the check: flags, status, header
// and trailer fields; the bytes the check's CRC covers before the body.
func (r *StoredResponse) appendFields(b []byte) []byte {
	b = append(b, r.Flags)
	b = binary.AppendUvarint(b, r.Status)
	if r.Flags&RespHeaderSet != 0 {
		b = binary.AppendUvarint(b, uint64(len(r.Header)))
		b = append(b, r.Header...)
	}
	if r.Flags&RespTrailerSet != 0 {
		b = binary.AppendUvarint(b, uint64(len(r.Trailer)))
		b = append(b, r.Trailer...)
	}
	return b
}

// Append appends r's bytes to b: AppendHead's, then Body as stored.
func (r *StoredResponse) Append(b []byte) []byte {
	return append(r.AppendHead(slices.Grow(b, r.headLen()+len(r.Body))), r.Body...)
}

// EncodeResponse returns the stored bytes of resp, its body compressed by
// codec when that pays (BodyCodec.Compress's rules), built in one buffer:
// the body is compressed straight after the head, where the frame used to
// be built apart and copied in (a 1 MiB body was allocated three times
// over; docs/performance.md, "1 MiB request and response bodies"). Postgres stores these bytes as the response column; they
// are EncodeResponseParts's head and tail joined.
func EncodeResponse(codec *BodyCodec, resp store.Response) []byte {
	r := headOf(resp)
	r.Flags |= RespChecked
	if resp.Body == nil {
		b := r.appendFields(make([]byte, 0, r.headLen()))
		return appendCheck(b, b, nil)
	}
	r.Flags |= RespBodySet
	b := r.appendFields(make([]byte, 0, r.headLen()+codec.MaxCompressedLen(len(resp.Body))))
	fieldsEnd := len(b)
	b = append(b, make([]byte, CheckLen)...) // filled in once the stored body is known
	b, z := codec.AppendCompress(b, resp.Header, resp.Body)
	if z {
		b[0] |= RespBodyZstd // the flags byte, first
	}
	body := b[fieldsEnd+CheckLen:]
	if len(body) > maxChecked {
		// Beyond the check's length field (no configurable response
		// comes near): stored as before, unchecked.
		r.Flags = b[0] &^ RespChecked
		r.Body = body
		return r.Append(nil)
	}
	binary.BigEndian.PutUint32(b[fieldsEnd:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[fieldsEnd+4:], checkSum(b[:fieldsEnd], body))
	return b
}

// appendCheck appends to b the check of a response whose head fields are
// fields (appendFields's bytes, which b ends with) and whose stored body is
// body.
func appendCheck(b, fields, body []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return binary.BigEndian.AppendUint32(b, checkSum(fields, body))
}

// EncodeResponseParts returns EncodeResponse(codec, resp) in two parts,
// head then stored body, for a caller that can send them apart (Valkey's
// complete.lua concatenates its ARGV[2] and ARGV[5]): the same bytes, but
// a body the codec leaves as it is (shorter than MinCompressBytes, already
// Content-Encoded, or incompressible) is resp.Body's own bytes instead of
// a copy after the head (that copy was a third 1 MiB buffer live
// while Complete waited for Valkey). A compressed body is its zstd frame,
// in a buffer of its own. tail is nil when resp has no body.
func EncodeResponseParts(codec *BodyCodec, resp store.Response) (head, tail []byte) {
	r := headOf(resp)
	if resp.Body == nil {
		r.Flags |= RespChecked
		head = r.appendFields(make([]byte, 0, r.headLen()))
		return appendCheck(head, head, nil), nil
	}
	var z bool
	if len(resp.Body) < MinCompressBytes || hasContentEncoding(resp.Header) {
		// The codec leaves these bodies as they are, without allocating;
		// it still decides, so a disagreement here costs an allocation,
		// never different bytes.
		tail, z = codec.Compress(resp.Header, resp.Body)
	} else {
		// One buffer the worst-case frame fits in: Compress would grow
		// its body-sized buffer for an incompressible body.
		tail, z = codec.AppendCompress(make([]byte, 0, codec.MaxCompressedLen(len(resp.Body))), resp.Header, resp.Body)
		if !z {
			tail = resp.Body // drop the copy AppendCompress made
		}
	}
	r.Flags |= RespBodySet
	if z {
		r.Flags |= RespBodyZstd
	}
	if len(tail) > maxChecked {
		return r.AppendHead(make([]byte, 0, r.headLen())), tail
	}
	r.Flags |= RespChecked
	head = r.appendFields(make([]byte, 0, r.headLen()))
	return appendCheck(head, head, tail), tail
}

// ParseResponse parses stored response bytes without decompressing the
// body (Body aliases b). It accepts only the one encoding Append writes
// for what it returns (shortest uvarints, header names in order, no empty
// trailer field, flags this build knows), so a response read back and
// written again is the same bytes. Every error wraps store.ErrStoredResponse.
func ParseResponse(b []byte) (StoredResponse, error) {
	var r StoredResponse
	whole := b
	if len(b) < 1 {
		return r, fmt.Errorf("%w: empty", store.ErrStoredResponse)
	}
	r.Flags, b = b[0], b[1:]
	if r.Flags&^RespKnownFlags != 0 {
		return r, fmt.Errorf("%w: unknown flags %#x", store.ErrStoredResponse, r.Flags)
	}
	if r.Flags&RespBodyZstd != 0 && r.Flags&RespBodySet == 0 {
		return r, fmt.Errorf("%w: compressed flag without body", store.ErrStoredResponse)
	}
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
			return 0, fmt.Errorf("%w: bad varint", store.ErrStoredResponse)
		}
		b = b[n:]
		return v, nil
	}
	var err error
	if r.Status, err = uvarint(); err != nil {
		return r, err
	}
	field := func() ([]byte, error) {
		n, err := uvarint()
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) < n {
			return nil, fmt.Errorf("%w: header of %d bytes truncated", store.ErrStoredResponse, n)
		}
		h := b[:n]
		b = b[n:]
		dec, err := DecodeHeader(h)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrStoredResponse, err)
		}
		if !bytes.Equal(EncodeHeader(dec), h) {
			return nil, fmt.Errorf("%w: header not in canonical order", store.ErrStoredResponse)
		}
		return h, nil
	}
	if r.Flags&RespHeaderSet != 0 {
		if r.Header, err = field(); err != nil {
			return r, err
		}
	}
	if r.Flags&RespTrailerSet != 0 {
		if r.Trailer, err = field(); err != nil {
			return r, err
		}
		if len(r.Trailer) == 0 {
			return r, fmt.Errorf("%w: empty trailers flagged", store.ErrStoredResponse)
		}
	}
	if r.Flags&RespChecked != 0 {
		fields := whole[:len(whole)-len(b)]
		if len(b) < CheckLen {
			return r, fmt.Errorf("%w: %w: check cut short", store.ErrStoredResponse, store.ErrStoredResponseDamaged)
		}
		n, sum := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
		b = b[CheckLen:]
		if uint64(len(b)) != uint64(n) {
			return r, fmt.Errorf("%w: %w: body of %d bytes, %d written", store.ErrStoredResponse, store.ErrStoredResponseDamaged, len(b), n)
		}
		if got := checkSum(fields, b); got != sum {
			return r, fmt.Errorf("%w: %w: CRC-32C %08x, %08x written", store.ErrStoredResponse, store.ErrStoredResponseDamaged, got, sum)
		}
		r.Sum = sum
	} else if lostCheck(b) {
		return r, fmt.Errorf("%w: %w: the check's flag is not set, yet a check of the bytes after it follows the fields", store.ErrStoredResponse, store.ErrStoredResponseDamaged)
	}
	if r.Flags&RespBodySet != 0 {
		r.Body = b
	} else if len(b) != 0 {
		return r, fmt.Errorf("%w: %d bytes after a response without body", store.ErrStoredResponse, len(b))
	}
	return r, nil
}

// lostCheck reports whether rest, what follows the fields of a response
// whose flags say it has no check, begins as a check does: a 4-byte
// big-endian length equal to the count of the bytes after the check.
// Such a response had the check and lost its flag (one flipped bit, which
// read it as a response written before the check and replayed the check's
// bytes as the start of its body: TestParseResponseRejectsAnyBitFlipped,
// e2e TestFaultCheckFlagLostNeverReplayed), so it is damaged, whatever else
// was damaged with the flag (the CRC-32C is not needed to tell). A
// response written before the check never has a check's bytes there: the
// length would have to be its body's first bytes, the count of its bytes
// after the eighth (zero bytes first: a 3-byte gRPC message is the one
// body that can; docs/protocol.md, "The check", says what becomes of it).
func lostCheck(rest []byte) bool {
	return len(rest) >= CheckLen && uint64(binary.BigEndian.Uint32(rest)) == uint64(len(rest)-CheckLen)
}

// Response returns the response r stores, its body decompressed by codec
// (always a copy, never aliasing r.Body), with StoredAt storedAt. A status
// outside 100..599 (Response.Status's range, which every Complete checks),
// a header that does not decode or a body that does not decompress is an
// error wrapping store.ErrStoredResponse.
func (r *StoredResponse) Response(codec *BodyCodec, storedAt time.Time) (*store.Response, error) {
	if r.Status < 100 || r.Status > 599 {
		return nil, fmt.Errorf("%w: status %d", store.ErrStoredResponse, r.Status)
	}
	resp := &store.Response{Status: int(r.Status), Omitted: r.Flags&RespOmitted != 0, StoredAt: storedAt}
	var err error
	if r.Flags&RespHeaderSet != 0 {
		if resp.Header, err = DecodeHeader(r.Header); err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrStoredResponse, err)
		}
		if resp.Header == nil {
			resp.Header = make(http.Header)
		}
	}
	if r.Flags&RespTrailerSet != 0 {
		if resp.Trailer, err = DecodeHeader(r.Trailer); err != nil {
			return nil, fmt.Errorf("%w: trailers: %w", store.ErrStoredResponse, err)
		}
	}
	switch {
	case r.Flags&RespBodyZstd != 0:
		if resp.Body, err = codec.Decompress(r.Body); err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrStoredResponse, err)
		}
	case r.Flags&RespBodySet != 0:
		resp.Body = append([]byte{}, r.Body...)
	}
	return resp, nil
}

// DecodeResponse reverses EncodeResponse: ParseResponse, then Response.
// Every error wraps store.ErrStoredResponse.
func DecodeResponse(codec *BodyCodec, b []byte, storedAt time.Time) (*store.Response, error) {
	r, err := ParseResponse(b)
	if err != nil {
		return nil, err
	}
	return r.Response(codec, storedAt)
}
