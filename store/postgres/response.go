package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
)

// Flag bits of the first byte of the response column (layout 3), the same
// bits as the response part of the Valkey store's layout 3.
const (
	respOmitted    byte = 1 << 0 // store.Response.Omitted
	respHeaderSet  byte = 1 << 1 // Header was non-nil: a header field follows
	respBodySet    byte = 1 << 2 // Body was non-nil: the rest is the body
	respTrailerSet byte = 1 << 3 // Trailer was non-empty: a trailer field follows
	respBodyZstd   byte = 1 << 4 // the body is a zstd frame (store.BodyCodec)
	respKnownFlags      = respOmitted | respHeaderSet | respBodySet | respTrailerSet | respBodyZstd
)

// errResponse is wrapped by every error of a response column that does not
// parse: a store error, never a guess at what was meant.
var errResponse = errors.New("response column of layout 3")

// encodeResponse is the response column of a row that Complete writes
// (layout 3, docs/protocol.md "Store records (Postgres)"): the flags byte,
// the status as a uvarint, the header and the trailer each as a uvarint
// length and the header encoding of the Valkey store (when their flag is
// set), then the body to the end, a zstd frame of codec when that pays.
// These are the bytes of the response part of a Valkey layout 3 record.
func encodeResponse(codec *store.BodyCodec, resp store.Response) []byte {
	var flags byte
	var header, trailer, body []byte
	if resp.Omitted {
		flags |= respOmitted
	}
	if resp.Header != nil {
		flags |= respHeaderSet
		header = valkey.EncodeHeader(resp.Header)
	}
	if len(resp.Trailer) > 0 {
		flags |= respTrailerSet
		trailer = valkey.EncodeHeader(resp.Trailer)
	}
	if resp.Body != nil {
		flags |= respBodySet
		var z bool
		if body, z = codec.Compress(resp.Header, resp.Body); z {
			flags |= respBodyZstd
		}
	}
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(header)+len(trailer)+len(body))
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(resp.Status))
	if flags&respHeaderSet != 0 {
		b = binary.AppendUvarint(b, uint64(len(header)))
		b = append(b, header...)
	}
	if flags&respTrailerSet != 0 {
		b = binary.AppendUvarint(b, uint64(len(trailer)))
		b = append(b, trailer...)
	}
	return append(b, body...)
}

// decodeResponse reverses encodeResponse, decompressing the body with
// codec; storedAt is the row's stored_at.
func decodeResponse(codec *store.BodyCodec, b []byte, storedAt time.Time) (*store.Response, error) {
	if len(b) < 1 {
		return nil, fmt.Errorf("%w: empty", errResponse)
	}
	flags := b[0]
	b = b[1:]
	if flags&^respKnownFlags != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", errResponse, flags)
	}
	if flags&respBodyZstd != 0 && flags&respBodySet == 0 {
		return nil, fmt.Errorf("%w: compressed flag without body", errResponse)
	}
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: bad varint", errResponse)
		}
		b = b[n:]
		return v, nil
	}
	status, err := uvarint()
	if err != nil {
		return nil, err
	}
	if status < 100 || status > 599 {
		return nil, fmt.Errorf("%w: status %d", errResponse, status)
	}
	resp := &store.Response{Status: int(status), Omitted: flags&respOmitted != 0, StoredAt: storedAt}
	field := func() ([]byte, error) {
		n, err := uvarint()
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) < n {
			return nil, fmt.Errorf("%w: header of %d bytes truncated", errResponse, n)
		}
		f := b[:n]
		b = b[n:]
		return f, nil
	}
	if flags&respHeaderSet != 0 {
		f, err := field()
		if err != nil {
			return nil, err
		}
		if resp.Header, err = valkey.DecodeHeader(f); err != nil {
			return nil, fmt.Errorf("%w: %w", errResponse, err)
		}
		if resp.Header == nil {
			resp.Header = make(map[string][]string)
		}
	}
	if flags&respTrailerSet != 0 {
		f, err := field()
		if err != nil {
			return nil, err
		}
		if resp.Trailer, err = valkey.DecodeHeader(f); err != nil {
			return nil, fmt.Errorf("%w: trailers: %w", errResponse, err)
		}
	}
	switch {
	case flags&respBodyZstd != 0:
		if resp.Body, err = codec.Decompress(b); err != nil {
			return nil, fmt.Errorf("%w: %w", errResponse, err)
		}
	case flags&respBodySet != 0:
		resp.Body = append([]byte{}, b...)
	case len(b) != 0:
		return nil, fmt.Errorf("%w: %d bytes after a response without body", errResponse, len(b))
	}
	return resp, nil
}
