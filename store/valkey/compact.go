package valkey

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/store"
)

// Flag bits of the first byte of a layout 3 response encoding.
const (
	respOmitted    byte = 1 << 0 // store.Response.Omitted
	respHeaderSet  byte = 1 << 1 // Header was non-nil: a header field follows
	respBodySet    byte = 1 << 2 // Body was non-nil: the rest is the body
	respTrailerSet byte = 1 << 3 // Trailer was non-empty: a trailer field follows
	respBodyZstd   byte = 1 << 4 // the body is a zstd frame (store.BodyCodec)
	respKnownFlags      = respOmitted | respHeaderSet | respBodySet | respTrailerSet | respBodyZstd
)

// errCompact is wrapped by every error of a layout 3 record that does not
// parse: a store error, never a guess at what was meant.
var errCompact = errors.New("layout 3 record")

// compactRecord is a completed record of layout 3 as its p fields hold it
// (docs/protocol.md, "Completed record (layout 3)"). The body stays as
// stored (a zstd frame when flags has respBodyZstd), so that decoding and
// encoding are exact inverses.
type compactRecord struct {
	owner, scope, key, fingerprint, recipe string
	createdMs, storedAtMs                  int64
	flags                                  byte
	status                                 uint64
	header, trailer                        []byte // in EncodeHeader's encoding
	body                                   []byte
}

// appendNetstring appends s as complete.lua's ns() writes it: its length
// in decimal, ':', its bytes.
func appendNetstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// encodeResponse is the response part of a layout 3 record, written by
// Complete and sent as complete.lua's ARGV[2]: the flags byte, the status
// as a uvarint, the header and trailer each as a uvarint length and
// EncodeHeader bytes (when their flag is set), then the body to the end.
func (c *compactRecord) encodeResponse() []byte {
	b := make([]byte, 0, c.headLen()+len(c.body))
	return append(c.appendHead(b), c.body...)
}

// headLen bounds the length of appendHead's bytes.
func (c *compactRecord) headLen() int {
	return 1 + binary.MaxVarintLen64*3 + len(c.header) + len(c.trailer)
}

// appendHead appends encodeResponse's bytes before the body.
func (c *compactRecord) appendHead(b []byte) []byte {
	b = append(b, c.flags)
	b = binary.AppendUvarint(b, c.status)
	if c.flags&respHeaderSet != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.header)))
		b = append(b, c.header...)
	}
	if c.flags&respTrailerSet != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.trailer)))
		b = append(b, c.trailer...)
	}
	return b
}

// encodeResponseOf returns compactResponse(codec, resp).encodeResponse(),
// the same bytes, built in one buffer: the body is compressed straight
// after the head, where the frame used to be built apart and copied in
// (issue 17: a 1 MiB body was allocated three times over).
func encodeResponseOf(codec *store.BodyCodec, resp store.Response) []byte {
	body := resp.Body
	resp.Body = nil
	c := compactResponse(codec, resp)
	if body == nil {
		return c.encodeResponse()
	}
	c.flags |= respBodySet
	b := c.appendHead(make([]byte, 0, c.headLen()+codec.MaxCompressedLen(len(body))))
	b, z := codec.AppendCompress(b, resp.Header, body)
	if z {
		b[0] |= respBodyZstd // the flags byte, first
	}
	return b
}

// encodeResponseParts returns encodeResponseOf(codec, resp) in two parts,
// head then stored body, sent as complete.lua's ARGV[2] and ARGV[5] for
// the server to concatenate: the same record bytes, but a body the codec
// leaves as it is (shorter than store.MinCompressBytes, already
// Content-Encoded, or incompressible) travels as resp.Body's own bytes
// instead of a copy after the head (issue 17: that copy was a third 1 MiB
// buffer live while Complete waited for Valkey). A compressed body is its
// zstd frame, in a buffer of its own. tail is nil when resp has no body.
func encodeResponseParts(codec *store.BodyCodec, resp store.Response) (head, tail []byte) {
	body := resp.Body
	resp.Body = nil
	c := compactResponse(codec, resp)
	if body == nil {
		return c.encodeResponse(), nil
	}
	var z bool
	if len(body) < store.MinCompressBytes || contentEncoded(resp.Header) {
		// The codec leaves these bodies as they are, without allocating;
		// it still decides, so a disagreement here costs an allocation,
		// never different bytes.
		tail, z = codec.Compress(resp.Header, body)
	} else {
		// One buffer the worst-case frame fits in: Compress would grow
		// its body-sized buffer for an incompressible body.
		tail, z = codec.AppendCompress(make([]byte, 0, codec.MaxCompressedLen(len(body))), resp.Header, body)
		if !z {
			tail = body // drop the copy AppendCompress made
		}
	}
	c.flags |= respBodySet
	if z {
		c.flags |= respBodyZstd
	}
	return c.appendHead(make([]byte, 0, c.headLen())), tail
}

// contentEncoded reports whether h names a Content-Encoding other than
// identity, store.BodyCodec's rule for leaving a body uncompressed.
// encodeResponseParts only uses it to choose where the codec writes.
func contentEncoded(h map[string][]string) bool {
	for name, vals := range h {
		if len(name) == len("Content-Encoding") && strings.EqualFold(name, "Content-Encoding") {
			for _, v := range vals {
				if v != "" && v != "identity" {
					return true
				}
			}
		}
	}
	return false
}

// encode returns the whole layout 3 record, as complete.lua assembles it
// (the concatenation of p0 .. p(pn-1)).
func (c *compactRecord) encode() []byte {
	var b []byte
	for _, s := range []string{c.owner, c.scope, c.key, c.fingerprint, c.recipe,
		strconv.FormatInt(c.createdMs, 10), strconv.FormatInt(c.storedAtMs, 10)} {
		b = appendNetstring(b, s)
	}
	return append(b, c.encodeResponse()...)
}

// decodeCompact parses a layout 3 record. It accepts only the one encoding
// encode writes for what it returns (shortest decimals and uvarints,
// header names in order, flags this build knows), so a record read back
// and written again is the same bytes.
func decodeCompact(b []byte) (*compactRecord, error) {
	var c compactRecord
	str := func() (string, error) {
		i := bytes.IndexByte(b, ':')
		if i < 1 || i > 10 {
			return "", fmt.Errorf("%w: no length", errCompact)
		}
		n, err := canonicalInt(b[:i])
		if err != nil {
			return "", err
		}
		b = b[i+1:]
		if int64(len(b)) < n {
			return "", fmt.Errorf("%w: field of %d bytes truncated", errCompact, n)
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	for _, p := range []*string{&c.owner, &c.scope, &c.key, &c.fingerprint, &c.recipe} {
		var err error
		if *p, err = str(); err != nil {
			return nil, err
		}
	}
	for _, p := range []*int64{&c.createdMs, &c.storedAtMs} {
		s, err := str()
		if err != nil {
			return nil, err
		}
		if *p, err = canonicalInt([]byte(s)); err != nil {
			return nil, err
		}
	}
	if len(b) < 1 {
		return nil, fmt.Errorf("%w: no response", errCompact)
	}
	c.flags, b = b[0], b[1:]
	if c.flags&^respKnownFlags != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", errCompact, c.flags)
	}
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
			return 0, fmt.Errorf("%w: bad varint", errCompact)
		}
		b = b[n:]
		return v, nil
	}
	var err error
	if c.status, err = uvarint(); err != nil {
		return nil, err
	}
	field := func() ([]byte, error) {
		n, err := uvarint()
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) < n {
			return nil, fmt.Errorf("%w: header of %d bytes truncated", errCompact, n)
		}
		h := b[:n]
		b = b[n:]
		dec, err := DecodeHeader(h)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errCompact, err)
		}
		if !bytes.Equal(EncodeHeader(dec), h) {
			return nil, fmt.Errorf("%w: header not in canonical order", errCompact)
		}
		return h, nil
	}
	if c.flags&respHeaderSet != 0 {
		if c.header, err = field(); err != nil {
			return nil, err
		}
	}
	if c.flags&respTrailerSet != 0 {
		if c.trailer, err = field(); err != nil {
			return nil, err
		}
		if len(c.trailer) == 0 {
			return nil, fmt.Errorf("%w: empty trailers flagged", errCompact)
		}
	}
	if c.flags&respBodySet != 0 {
		c.body = b
	} else if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after a response without body", errCompact, len(b))
	}
	if c.flags&respBodyZstd != 0 && c.flags&respBodySet == 0 {
		return nil, fmt.Errorf("%w: compressed flag without body", errCompact)
	}
	return &c, nil
}

// canonicalInt parses a non-negative decimal integer written without
// leading zeros or sign.
func canonicalInt(d []byte) (int64, error) {
	n, err := strconv.ParseInt(string(d), 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != string(d) {
		return 0, fmt.Errorf("%w: bad number %q", errCompact, d)
	}
	return n, nil
}

// compactResponse builds the layout 3 response part of resp, its body
// compressed by codec when that pays.
func compactResponse(codec *store.BodyCodec, resp store.Response) *compactRecord {
	c := &compactRecord{status: uint64(resp.Status)}
	if resp.Omitted {
		c.flags |= respOmitted
	}
	if resp.Header != nil {
		c.flags |= respHeaderSet
		c.header = EncodeHeader(resp.Header)
	}
	if len(resp.Trailer) > 0 {
		c.flags |= respTrailerSet
		c.trailer = EncodeHeader(resp.Trailer)
	}
	if resp.Body != nil {
		c.flags |= respBodySet
		var z bool
		if c.body, z = codec.Compress(resp.Header, resp.Body); z {
			c.flags |= respBodyZstd
		}
	}
	return c
}

// response returns the stored response of c, its body decompressed.
func (c *compactRecord) response(codec *store.BodyCodec) (*store.Response, error) {
	if c.status > 999 {
		return nil, fmt.Errorf("%w: status %d", errCompact, c.status)
	}
	resp := &store.Response{Status: int(c.status), Omitted: c.flags&respOmitted != 0, StoredAt: msOrZero(c.storedAtMs)}
	var err error
	if c.flags&respHeaderSet != 0 {
		if resp.Header, err = DecodeHeader(c.header); err != nil {
			return nil, err
		}
		if resp.Header == nil {
			resp.Header = make(map[string][]string)
		}
	}
	if c.flags&respTrailerSet != 0 {
		if resp.Trailer, err = DecodeHeader(c.trailer); err != nil {
			return nil, err
		}
	}
	if c.flags&respBodySet != 0 {
		resp.Body = append([]byte{}, c.body...)
		if c.flags&respBodyZstd != 0 {
			if resp.Body, err = codec.Decompress(c.body); err != nil {
				return nil, err
			}
		}
	}
	return resp, nil
}
