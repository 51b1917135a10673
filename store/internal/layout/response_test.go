package layout_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
)

// plainEncoding is the stored response of resp built the plain way, as
// docs/protocol.md states it: the fields (flags, status, header,
// trailer), then the check (the stored body's length and the CRC-32C of
// the fields and the stored body), then Compress's result, flagged.
func plainEncoding(codec *layout.BodyCodec, resp store.Response) []byte {
	r := layout.StoredResponse{Status: uint64(resp.Status)}
	if resp.Omitted {
		r.Flags |= layout.RespOmitted
	}
	if resp.Header != nil {
		r.Flags |= layout.RespHeaderSet
		r.Header = layout.EncodeHeader(resp.Header)
	}
	if t := layout.EncodeHeader(resp.Trailer); len(t) > 0 {
		r.Flags |= layout.RespTrailerSet
		r.Trailer = t
	}
	var body []byte
	if resp.Body != nil {
		r.Flags |= layout.RespBodySet
		var z bool
		if body, z = codec.Compress(resp.Header, resp.Body); z {
			r.Flags |= layout.RespBodyZstd
		}
	}
	fields := r.AppendHead(nil) // unchecked: the fields alone
	fields[0] |= layout.RespChecked
	table := crc32.MakeTable(crc32.Castagnoli)
	sum := crc32.Update(crc32.Checksum(fields, table), table, body)
	b := binary.BigEndian.AppendUint32(append([]byte{}, fields...), uint32(len(body)))
	b = binary.BigEndian.AppendUint32(b, sum)
	return append(b, body...)
}

// TestEncodeResponseSameBytes (TestEncodeResponseOfSameBytes of the Valkey
// store before the encoding moved here): the one-buffer encoding (Complete's,
// for large bodies) is byte for byte the plain encoding and
// EncodeResponseParts's head and tail joined, and decodes back to the response,
// for bodies absent, empty, small, compressible, incompressible (1 MiB each)
// and already content-encoded, with and without header and trailer; and it
// needs no buffer growth.
func TestEncodeResponseSameBytes(t *testing.T) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(17, 3))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	bodies := map[string][]byte{
		"nil":            nil,
		"empty":          {},
		"small":          []byte(`{"id":1}`),
		"compressible":   bytes.Repeat([]byte(`{"id":"ord_1","status":"created"},`), (1<<20)/34),
		"incompressible": random,
	}
	headers := map[string]http.Header{
		"no header": nil,
		"json":      {"Content-Type": {"application/json"}},
		"gzip":      {"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}},
	}
	at := time.UnixMilli(1_700_000_000_000)
	for bn, body := range bodies {
		for hn, h := range headers {
			for _, trailer := range []http.Header{nil, {"Grpc-Status": {"0"}}} {
				resp := store.Response{Status: 201, Header: h, Body: body, Trailer: trailer, StoredAt: at}
				want := plainEncoding(codec, resp)
				got := layout.EncodeResponse(codec, resp)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s body, %s, trailer %v: %d bytes, want the %d bytes of the plain encoding", bn, hn, trailer, len(got), len(want))
				}
				head, tail := layout.EncodeResponseParts(codec, resp)
				if joined := append(append([]byte{}, head...), tail...); !bytes.Equal(joined, want) {
					t.Fatalf("%s body, %s, trailer %v: parts join to %d bytes, want the %d bytes of EncodeResponse", bn, hn, trailer, len(joined), len(want))
				}
				if body == nil && tail != nil {
					t.Fatalf("%s, trailer %v: tail of %d bytes for no body, want nil", hn, trailer, len(tail))
				}
				if body != nil && cap(got) > 1+3*10+len(layout.EncodeHeader(h))+len(layout.EncodeHeader(trailer))+layout.CheckLen+codec.MaxCompressedLen(len(body)) {
					t.Errorf("%s body, %s: buffer of %d bytes grew past its first size", bn, hn, cap(got))
				}
				back, err := layout.DecodeResponse(codec, got, at)
				if err != nil || !reflect.DeepEqual(*back, resp) {
					t.Fatalf("%s body, %s, trailer %v: decodes to %v, %v; want the response back", bn, hn, trailer, back != nil, err)
				}
			}
		}
	}
	omitted := store.Response{Status: 201, Omitted: true}
	if got, want := layout.EncodeResponse(codec, omitted), plainEncoding(codec, omitted); !bytes.Equal(got, want) {
		t.Fatalf("omitted: %x, want %x", got, want)
	}
}

// pinnedResponses are responses with their stored bytes as written now
// (checked, flag 20) and as written before the check (captured from the
// Postgres store's encodeResponse of that build). The 272-byte JSON body
// was stored as a zstd frame then and is stored as it is now (under
// MinCompressBytes): its old bytes must still read back the same.
var pinnedResponses = []struct {
	resp        store.Response
	now, before string
}{
	{store.Response{Status: 204, Omitted: true}, "21cc01000000000140d78a", "01cc01"},
	{store.Response{Status: 200, Header: http.Header{}, Body: []byte{}}, "26c80100000000003cb61c16", "06c80100"},
	{store.Response{Status: 201, Header: http.Header{"Location": {"/v1/orders/1"}, "Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)},
		"26c901400000000c436f6e74656e742d54797065000000106170706c69636174696f6e2f6a736f6e000000084c6f636174696f6e0000000c2f76312f6f72646572732f3100000008f7192ce67b226964223a317d",
		"06c901400000000c436f6e74656e742d54797065000000106170706c69636174696f6e2f6a736f6e000000084c6f636174696f6e0000000c2f76312f6f72646572732f317b226964223a317d"},
	{store.Response{Status: 200, Body: []byte("x"), Trailer: http.Header{"Grpc-Status": {"0"}, "X-Checksum": {"a", ""}}},
		"2cc801390000000b477270632d53746174757300000001300000000a582d436865636b73756d00000001610000000a582d436865636b73756d0000000000000001492f108478",
		"0cc801390000000b477270632d53746174757300000001300000000a582d436865636b73756d00000001610000000a582d436865636b73756d0000000078"},
	{store.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: bytes.Repeat([]byte(`{"id":"ord_1","status":"created"},`), 8)},
		"26c901240000000c436f6e74656e742d54797065000000106170706c69636174696f6e2f6a736f6e0000011076132e5e" + hex.EncodeToString(bytes.Repeat([]byte(`{"id":"ord_1","status":"created"},`), 8)),
		"16c901240000000c436f6e74656e742d54797065000000106170706c69636174696f6e2f6a736f6e28b52ffd400010005d010024027b226964223a226f72645f31222c22737461747573223a2263726561746564227d2c015416052b5a97"},
	{store.Response{Status: 200, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: bytes.Repeat([]byte("ab"), 100)},
		"26c8011c00000010436f6e74656e742d456e636f64696e6700000004677a6970000000c84248777c" + hex.EncodeToString(bytes.Repeat([]byte("ab"), 100)),
		"06c8011c00000010436f6e74656e742d456e636f64696e6700000004677a6970" + hex.EncodeToString(bytes.Repeat([]byte("ab"), 100))},
}

// TestEncodeResponsePinnedBytes pins the bytes of checked responses
// (docs/protocol.md, "response"), as EncodeResponse and
// EncodeResponseParts write them since the check was added.
func TestEncodeResponsePinnedBytes(t *testing.T) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range pinnedResponses {
		if got := hex.EncodeToString(layout.EncodeResponse(codec, tc.resp)); got != tc.now {
			t.Errorf("EncodeResponse(%+v) = %s, want %s", tc.resp, got, tc.now)
		}
		head, tail := layout.EncodeResponseParts(codec, tc.resp)
		if got := hex.EncodeToString(head) + hex.EncodeToString(tail); got != tc.now {
			t.Errorf("EncodeResponseParts(%+v) = %s, want %s", tc.resp, got, tc.now)
		}
	}
}

// TestDecodeResponseWrittenBeforeTheCheck: the bytes written before the
// check still decode to what the same response written now decodes to, and
// read back and written again are the same bytes: records stored before
// the upgrade keep replaying.
func TestDecodeResponseWrittenBeforeTheCheck(t *testing.T) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range pinnedResponses {
		b, _ := hex.DecodeString(tc.before)
		got, err := layout.DecodeResponse(codec, b, time.Time{})
		if err != nil {
			t.Fatalf("%s: %v", tc.before, err)
		}
		want, err := layout.DecodeResponse(codec, layout.EncodeResponse(codec, tc.resp), time.Time{})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s decodes to %+v, want %+v (%v)", tc.before, got, want, err)
		}
		parsed, err := layout.ParseResponse(b)
		if err != nil || !bytes.Equal(parsed.Append(nil), b) {
			t.Errorf("%s: parsed and written again: %x, %v", tc.before, parsed.Append(nil), err)
		}
	}
}

// TestParseResponseRejectsDamage: a checked response cut short anywhere,
// or with any byte changed, is refused with ErrStoredResponseDamaged (and
// ErrStoredResponse), never decoded into a shorter or other response. An
// uncompressed body cut short used to replay shorter with no error.
func TestParseResponseRejectsDamage(t *testing.T) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	good := layout.EncodeResponse(codec, store.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1","amount":500}`)})
	if _, err := layout.DecodeResponse(codec, good, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(good); n++ {
		if _, err := layout.DecodeResponse(codec, good[:n], time.Time{}); !errors.Is(err, store.ErrStoredResponse) {
			t.Fatalf("cut to %d of %d bytes: %v, want a refusal", n, len(good), err)
		}
	}
	cut := good[:len(good)-5]
	if _, err := layout.ParseResponse(cut); !errors.Is(err, store.ErrStoredResponseDamaged) {
		t.Errorf("body cut short: %v, want ErrStoredResponseDamaged", err)
	}
	for i := range good {
		bad := append([]byte{}, good...)
		bad[i] ^= 0x01
		if _, err := layout.DecodeResponse(codec, bad, time.Time{}); err == nil {
			t.Errorf("byte %d flipped: decoded without error", i)
		}
	}
}

// TestParseResponseRejectsAnyBitFlipped: a checked response with any one
// bit of any byte flipped is refused, and one whose flags byte lost the
// check's own bit (RespChecked), whatever else it holds (no body, a
// compressed body, trailers), is refused as damaged
// (ErrStoredResponseDamaged). Such a response used to be read as one
// written before the check: its 8 check bytes decoded as the start of the
// body, and the record replayed as a success.
func TestParseResponseRejectsAnyBitFlipped(t *testing.T) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	for name, resp := range map[string]store.Response{
		"json body":  {Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1","amount":500}`)},
		"no body":    {Status: 204, Header: http.Header{"X-Id": {"1"}}},
		"empty body": {Status: 200, Body: []byte{}},
		"compressed": {Status: 200, Body: bytes.Repeat([]byte("compressible "), 200)},
		"trailers":   {Status: 200, Body: []byte("x"), Trailer: http.Header{"Grpc-Status": {"0"}}},
		"omitted":    {Status: 201, Omitted: true},
	} {
		good := layout.EncodeResponse(codec, resp)
		if good[0]&layout.RespChecked == 0 {
			t.Fatalf("%s: written without the check", name)
		}
		lost := append([]byte{}, good...)
		lost[0] &^= layout.RespChecked
		if r, err := layout.DecodeResponse(codec, lost, time.Time{}); !errors.Is(err, store.ErrStoredResponseDamaged) {
			t.Errorf("%s: check flag lost: %+v, %v; want ErrStoredResponseDamaged", name, r, err)
		}
		for i := range good {
			for bit := range 8 {
				bad := append([]byte{}, good...)
				bad[i] ^= 1 << bit
				if r, err := layout.DecodeResponse(codec, bad, time.Time{}); err == nil {
					t.Errorf("%s: bit %d of byte %d flipped: decoded to %+v without error", name, bit, i, r)
				}
			}
		}
	}
}

// TestParseResponseOneEncoding: ParseResponse refuses what Append would
// never write (a longer uvarint, header names out of order, an empty
// trailer field flagged), so a parsed response written again is the same
// bytes; every refusal wraps ErrStoredResponse.
func TestParseResponseOneEncoding(t *testing.T) {
	hdr := func(names ...string) []byte {
		var b []byte
		for _, n := range names {
			b = append(b, 0, 0, 0, byte(len(n)))
			b = append(b, n...)
			b = append(b, 0, 0, 0, 1, 'v')
		}
		return b
	}
	unordered := hdr("B", "A")
	for name, b := range map[string][]byte{
		"long status uvarint":   {0, 0xc8, 0x81, 0x00},
		"header out of order":   append([]byte{layout.RespHeaderSet, 0xc8, 1, byte(len(unordered))}, unordered...),
		"empty trailer flagged": {layout.RespTrailerSet, 0xc8, 1, 0},
	} {
		if r, err := layout.ParseResponse(b); !errors.Is(err, store.ErrStoredResponse) {
			t.Errorf("%s: ParseResponse = %+v, %v; want an error wrapping ErrStoredResponse", name, r, err)
		}
	}
	ordered := hdr("A", "B")
	b := append([]byte{layout.RespHeaderSet | layout.RespBodySet, 0xc8, 1, byte(len(ordered))}, ordered...)
	b = append(b, "body"...)
	r, err := layout.ParseResponse(b)
	if err != nil || !bytes.Equal(r.Append(nil), b) || string(r.Body) != "body" {
		t.Fatalf("ParseResponse(%x) = %+v, %v; want it to append back to the same bytes", b, r, err)
	}
}
