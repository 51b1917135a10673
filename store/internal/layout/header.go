package layout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// The stored header encodings, one place for the three formats written
// over the years; the bytes of each stay as they are, since records
// already written must decode (docs/protocol.md, "Layout versions"):
//
//   - EncodeHeader: name/value pairs with 4-byte lengths. Valkey's "h"
//     field, the Postgres headers and trailers columns, and the header
//     and trailer fields of a stored response (layout 3).
//   - BoltV2Header: bolt record values of format version 2: counted names
//     and values with 4-byte lengths. Only read now.
//   - BoltV3Header: bolt record values of format version 3: the same
//     counted shape with uvarint lengths.
//
// Writing one format everywhere would take a new bolt format version; the
// two bolt formats are one code with two integer widths.

// EncodeHeader is the unambiguous header encoding every store shares (the
// Valkey record's "h" field, the Postgres headers and trailers columns, a
// stored response's header and trailer fields): for each header name in
// byte order, for each of its values in order, the name's length as a
// 4-byte big-endian unsigned integer, the name, the value's length
// likewise, the value. A nil or empty h encodes to no bytes. Names are
// kept exactly as in the map (not canonicalized).
func EncodeHeader(h http.Header) []byte {
	names := make([]string, 0, len(h))
	size := 0
	for name, vals := range h {
		names = append(names, name)
		for _, v := range vals {
			size += 8 + len(name) + len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	for _, name := range names {
		for _, v := range h[name] {
			b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
			b = append(b, name...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// DecodeHeader reverses EncodeHeader; no bytes decode to a nil header. It
// returns an error for truncated input.
func DecodeHeader(b []byte) (http.Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := http.Header{}
	next := func() (string, error) {
		if len(b) < 4 {
			return "", errors.New("header encoding truncated")
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(n) {
			return "", errors.New("header encoding truncated")
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	for len(b) > 0 {
		name, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		h[name] = append(h[name], v)
	}
	return h, nil
}

// CountedHeader is the header encoding of bolt record values: the name
// count, then for each name in byte order its length and bytes, its value
// count, and each value's length and bytes. Every name is kept exactly as
// in the map (not canonicalized), with the order of its values, and names
// with no values are kept too. The integers are 4-byte big-endian in
// format version 2 (BoltV2Header) and uvarints in version 3
// (BoltV3Header).
type CountedHeader struct {
	// fixed32: the integers are 4-byte big-endian, not uvarints.
	fixed32 bool
}

var (
	// BoltV2Header is the header encoding of bolt format version 2.
	BoltV2Header = CountedHeader{fixed32: true}
	// BoltV3Header is the header encoding of bolt format version 3.
	BoltV3Header = CountedHeader{}
)

// ErrHeader is wrapped by the errors of CountedHeader.Decode.
var ErrHeader = errors.New("stored header")

// intLen is the most bytes one integer takes.
func (c CountedHeader) intLen() int {
	if c.fixed32 {
		return 4
	}
	return binary.MaxVarintLen64
}

func (c CountedHeader) appendInt(b []byte, v uint64) []byte {
	if c.fixed32 {
		return binary.BigEndian.AppendUint32(b, uint32(v))
	}
	return binary.AppendUvarint(b, v)
}

// minInt is the fewest bytes one integer takes, which bounds the size
// hints of a decode.
func (c CountedHeader) minInt() int {
	if c.fixed32 {
		return 4
	}
	return 1
}

// Encode returns the encoding of h. In format version 2 a length past
// 4 GiB does not fit; that format is only read now.
func (c CountedHeader) Encode(h http.Header) []byte {
	names := make([]string, 0, len(h))
	size := c.intLen()
	for name, vals := range h {
		names = append(names, name)
		size += 2*c.intLen() + len(name)
		for _, v := range vals {
			size += c.intLen() + len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = c.appendInt(b, uint64(len(names)))
	for _, name := range names {
		vals := h[name]
		b = c.appendInt(b, uint64(len(name)))
		b = append(b, name...)
		b = c.appendInt(b, uint64(len(vals)))
		for _, v := range vals {
			b = c.appendInt(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// Decode reverses Encode into a fresh map. Errors wrap ErrHeader.
func (c CountedHeader) Decode(b []byte) (http.Header, error) {
	next := func() (uint64, error) {
		if c.fixed32 {
			if len(b) < 4 {
				return 0, fmt.Errorf("%w: truncated", ErrHeader)
			}
			n := binary.BigEndian.Uint32(b)
			b = b[4:]
			return uint64(n), nil
		}
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated", ErrHeader)
		}
		b = b[n:]
		return v, nil
	}
	str := func() (string, error) {
		n, err := next()
		if err != nil {
			return "", err
		}
		if uint64(len(b)) < n {
			return "", fmt.Errorf("%w: truncated", ErrHeader)
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	count, err := next()
	if err != nil {
		return nil, err
	}
	// Every name takes at least two integers and every value one, which
	// bounds the size hints.
	h := make(http.Header, min(count, uint64(len(b)/(2*c.minInt()))))
	for range count {
		name, err := str()
		if err != nil {
			return nil, err
		}
		nvals, err := next()
		if err != nil {
			return nil, err
		}
		vals := make([]string, 0, min(nvals, uint64(len(b)/c.minInt())))
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
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrHeader, len(b))
	}
	return h, nil
}
