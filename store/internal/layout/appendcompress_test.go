package layout_test

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/store/internal/layout"
)

// TestAppendCompressIsCompress: AppendCompress appends exactly what
// Compress returns, with the same verdict, after any prefix, and fits in
// MaxCompressedLen spare bytes without growing (docs/performance.md, "1 MiB
// request and response bodies").
func TestAppendCompressIsCompress(t *testing.T) {
	c, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 1<<20+5)
	rng := rand.New(rand.NewPCG(17, 4))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	json := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
	}{
		{"empty", json, nil},
		{"short", json, []byte("abc")},
		{"text", json, bytes.Repeat([]byte("idempotency "), 100)},
		{"text-1MiB", json, bytes.Repeat([]byte("idempotency "), 1<<17)},
		{"random-1MiB", json, random},
		{"random-small", json, random[:4000]},
		{"encoded", http.Header{"Content-Encoding": {"br"}}, bytes.Repeat([]byte("a"), 5000)},
	} {
		want, wantZ := c.Compress(tc.h, tc.body)
		prefix := []byte("head")
		dst := append(make([]byte, 0, len(prefix)+c.MaxCompressedLen(len(tc.body))), prefix...)
		got, z := c.AppendCompress(dst, tc.h, tc.body)
		if z != wantZ || !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], want) {
			t.Errorf("%s: appended %d bytes (zstd %v), Compress gives %d (zstd %v)", tc.name, len(got)-len(prefix), z, len(want), wantZ)
		}
		if &got[:1][0] != &dst[:1][0] {
			t.Errorf("%s: the buffer grew past MaxCompressedLen", tc.name)
		}
	}
}
