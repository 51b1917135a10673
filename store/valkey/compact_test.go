package valkey

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/idemgate/idemgate/store/internal/layout"
)

// FuzzDecodeRecord: any bytes decode to an error or to a layout 3 record
// that encodes back to the same bytes (one encoding per record).
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte("5:alice12:POST /orders2:k12:fp15:b=raw&q=1&v=hs113:179612549882413:1796125498825\x07\xc9\x01\x00body"))
	f.Add([]byte("0:0:0:0:0:1:01:0\x00\x00"))
	f.Add((&compactRecord{owner: "o", resp: layout.StoredResponse{Flags: layout.RespHeaderSet | layout.RespTrailerSet | layout.RespBodySet | layout.RespBodyZstd, Status: 200,
		Header: layout.EncodeHeader(map[string][]string{"A": {"1"}}), Trailer: layout.EncodeHeader(map[string][]string{"T": {"x"}}), Body: []byte{0x28, 0xb5}}}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCompact(b)
		if err != nil {
			return
		}
		if got := c.encode(); !bytes.Equal(got, b) {
			t.Fatalf("decode(%q) re-encodes to %q", b, got)
		}
	})
}

// encode returns the whole layout 3 record, as complete.lua assembles it
// (the concatenation of p0 .. p(pn-1)).
func (c *compactRecord) encode() []byte {
	var b []byte
	for _, s := range []string{c.owner, c.scope, c.key, c.fingerprint, c.recipe,
		strconv.FormatInt(c.createdMs, 10), strconv.FormatInt(c.storedAtMs, 10)} {
		b = appendNetstring(b, s)
	}
	return c.resp.Append(b)
}
