package valkey

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// TestEncodeResponseOfSameBytes: the one-buffer encoding Complete sends
// (issue 17) is byte for byte the layout 3 response part compactResponse
// and encodeResponse write, and decodes back to the response, for bodies
// absent, empty, small, compressible, incompressible (1 MiB each) and
// already content-encoded, with and without header and trailer; and it
// needs no buffer growth.
func TestEncodeResponseOfSameBytes(t *testing.T) {
	codec, err := store.NewBodyCodec()
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
	for bn, body := range bodies {
		for hn, h := range headers {
			for _, trailer := range []http.Header{nil, {"Grpc-Status": {"0"}}} {
				resp := store.Response{Status: 201, Header: h, Body: body, Trailer: trailer}
				want := compactResponse(codec, resp).encodeResponse()
				got := encodeResponseOf(codec, resp)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s body, %s, trailer %v: %d bytes, want the %d bytes of encodeResponse", bn, hn, trailer, len(got), len(want))
				}
				if body != nil && cap(got) > 1+3*10+len(EncodeHeader(h))+len(EncodeHeader(trailer))+codec.MaxCompressedLen(len(body)) {
					t.Errorf("%s body, %s: buffer of %d bytes grew past its first size", bn, hn, cap(got))
				}
			}
		}
	}
	omitted := store.Response{Status: 201, Omitted: true}
	if got, want := encodeResponseOf(codec, omitted), compactResponse(codec, omitted).encodeResponse(); !bytes.Equal(got, want) {
		t.Fatalf("omitted: %x, want %x", got, want)
	}
}
