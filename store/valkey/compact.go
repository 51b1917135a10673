package valkey

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
)

// errCompact is wrapped by every error of a layout 3 record that does not
// parse: a store error, never a guess at what was meant. It wraps
// store.ErrStoredResponse: the record is a completed one, whose operation
// ran, so the proxy never takes its error for a store it could not reach
// (a fail_open route's forward;
// TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain).
var errCompact = fmt.Errorf("%w: layout 3 record", store.ErrStoredResponse)

// compactRecord is a completed record of layout 3 as its p fields hold it
// (docs/protocol.md, "Completed record (layout 3)"): the netstrings, then
// the response part, shared with the Postgres response column and kept as
// stored (layout.StoredResponse), so that decoding and encoding are exact
// inverses.
type compactRecord struct {
	owner, scope, key, fingerprint, recipe string
	createdMs, storedAtMs                  int64
	resp                                   layout.StoredResponse
}

// appendNetstring appends s as complete.lua's ns() writes it: its length
// in decimal, ':', its bytes.
func appendNetstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// encodeResponseParts is layout.EncodeResponseParts, the name Complete
// (valkey.go) calls.
func encodeResponseParts(codec *layout.BodyCodec, resp store.Response) (head, tail []byte) {
	return layout.EncodeResponseParts(codec, resp)
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
	var err error
	if c.resp, err = layout.ParseResponse(b); err != nil {
		return nil, fmt.Errorf("%w: %w", errCompact, err)
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

// response returns the stored response of c, its body decompressed.
func (c *compactRecord) response(codec *layout.BodyCodec) (*store.Response, error) {
	resp, err := c.resp.Response(codec, msOrZero(c.storedAtMs))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCompact, err)
	}
	return resp, nil
}
