package proxy

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/idemgate/idemgate/store"
)

// TestAcceptEncoding pins the reading of Accept-Encoding (RFC 9110 section
// 12.5.3): qvalues, identity, "*", and the field's absence, which counts as
// identity only (as Varnish and nginx's gunzip read it).
func TestAcceptEncoding(t *testing.T) {
	cases := []struct {
		field          []string // nil: no field
		coding         string
		accepts, ident bool
	}{
		{nil, "gzip", false, true},
		{[]string{""}, "gzip", false, true},
		{[]string{"gzip"}, "gzip", true, true},
		{[]string{"GZIP"}, "gzip", true, true},
		{[]string{"x-gzip"}, "gzip", true, true},
		{[]string{"gzip"}, "x-gzip", true, true},
		{[]string{"gzip"}, "br", false, true},
		{[]string{"gzip, deflate", "br;q=0.5"}, "br", true, true},
		{[]string{"br;q=0"}, "br", false, true},
		{[]string{"br; q=0.000"}, "br", false, true},
		{[]string{"br;q=0.001"}, "br", true, true},
		{[]string{"br;q=1.0"}, "br", true, true},
		{[]string{"br;q=1.5"}, "br", false, true},    // invalid weight: not accepted
		{[]string{"br;q=0.1234"}, "br", false, true}, // more than 3 digits
		{[]string{"br;q=abc"}, "br", false, true},
		{[]string{"br, br;q=0"}, "br", false, true}, // listed twice: the lower weight
		{[]string{"*"}, "zstd", true, true},
		{[]string{"*;q=0"}, "zstd", false, false},
		{[]string{"*;q=0, identity"}, "zstd", false, true},
		{[]string{"gzip, *;q=0"}, "gzip", true, false},
		{[]string{"identity;q=0"}, "gzip", false, false},
		{[]string{"zstd, *;q=0"}, "br", false, false},
	}
	for _, c := range cases {
		a := parseAcceptEncoding(c.field)
		if got := a.accepts(c.coding); got != c.accepts {
			t.Errorf("Accept-Encoding %q accepts %s = %v, want %v", c.field, c.coding, got, c.accepts)
		}
		if got := a.acceptsIdentity(); got != c.ident {
			t.Errorf("Accept-Encoding %q accepts identity = %v, want %v", c.field, got, c.ident)
		}
	}
}

func encode(t *testing.T, coding string, plain []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	var w interface {
		Write([]byte) (int, error)
		Close() error
	}
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "br":
		w = brotli.NewWriter(&b)
	case "deflate":
		w = zlib.NewWriter(&b)
	case "zstd":
		z, err := zstd.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		w = z
	default:
		t.Fatalf("no encoder for %s", coding)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestFitCodingDecodes checks the decoded replay: Content-Encoding gone,
// strong ETag weakened, Vary and the rest kept, digests dropped, and a
// stacked coding undone in reverse order.
func TestFitCodingDecodes(t *testing.T) {
	plain := []byte(strings.Repeat(`{"order":"ord_1"}`, 50))
	for _, coding := range []string{"gzip", "br", "deflate", "zstd", "gzip, br"} {
		body := plain
		for _, c := range strings.Split(coding, ", ") {
			body = encode(t, c, body)
		}
		stored := &store.Response{Status: 201, Body: body, Header: http.Header{
			"Content-Encoding": {coding}, "Etag": {`"v1"`}, "Vary": {"Accept-Encoding"},
			"Content-Type": {"application/json"}, "Content-Digest": {"sha-256=:x:"},
		}}
		r, _ := http.NewRequest("POST", "/", nil)
		got, err := fitCoding(r, stored, 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", coding, err)
		}
		if !bytes.Equal(got.Body, plain) {
			t.Fatalf("%s: body %q", coding, got.Body)
		}
		h := got.Header
		if h.Get("Content-Encoding") != "" || h.Get("Content-Digest") != "" || h.Get("Etag") != `W/"v1"` ||
			h.Get("Vary") != "Accept-Encoding" || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: header %v", coding, h)
		}
		if stored.Header.Get("Content-Encoding") != coding || !bytes.Equal(stored.Body, body) {
			t.Errorf("%s: the stored response was modified", coding)
		}
		// A request that accepts the coding gets it as stored.
		r.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
		if got, err := fitCoding(r, stored, 1<<20); err != nil || got != stored {
			t.Errorf("%s: accepted coding: %v, decoded anyway", coding, err)
		}
	}
}

// TestFitCodingLeavesWhatItCannotDecode: an unknown coding, a corrupt body
// and a decoded body over the limit are written as stored, with the reason.
func TestFitCodingLeavesWhatItCannotDecode(t *testing.T) {
	r, _ := http.NewRequest("POST", "/", nil)
	big := encode(t, "gzip", bytes.Repeat([]byte("a"), 1<<20))
	for name, c := range map[string]struct {
		coding string
		body   []byte
		want   error
	}{
		"unknown":   {"compress", []byte("x"), errUnknownCoding},
		"too large": {"gzip", big, errDecodedTooLarge},
		"corrupt":   {"gzip", []byte("not gzip"), nil},
	} {
		stored := &store.Response{Status: 200, Body: c.body, Header: http.Header{"Content-Encoding": {c.coding}}}
		got, err := fitCoding(r, stored, 64<<10)
		if got != stored || err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: got %p (stored %p), err %v, want %v", name, got, stored, err, c.want)
		}
	}
}

// TestContentCodingsWhateverTheCase: the stored Content-Encoding is found
// in any letter case of its name (a header map from a custom transport or
// a handler in process need not be canonical), and no other field is
// taken for it.
func TestContentCodingsWhateverTheCase(t *testing.T) {
	for _, tc := range []struct {
		h    http.Header
		want []string
	}{
		{http.Header{"Content-Encoding": {"gzip"}}, []string{"gzip"}},
		{http.Header{"content-encoding": {"GZIP, br"}}, []string{"gzip", "br"}},
		{http.Header{"CONTENT-ENCODING": {"identity"}}, nil},
		{http.Header{"X-Content-Encoding": {"gzip"}, "Content-Encodings": {"br"}, "Content-Type": {"gzip"}}, nil},
	} {
		if got := contentCodings(tc.h); !slices.Equal(got, tc.want) {
			t.Errorf("contentCodings(%v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}
