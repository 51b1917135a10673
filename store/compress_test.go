package store_test

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/store"
)

func TestBodyCodec(t *testing.T) {
	c, err := store.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	json := bytes.Repeat([]byte(`{"id":"ord_1","status":"created"},`), 10)
	noise := make([]byte, 4096)
	_, _ = rand.Read(noise)
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		want bool
	}{
		{"json", http.Header{"Content-Type": {"application/json"}}, json, true},
		{"small", nil, json[:store.MinCompressBytes-1], false},
		{"already encoded", http.Header{"content-encoding": {"gzip"}}, json, false},
		{"incompressible", nil, noise, false},
	} {
		out, z := c.Compress(tc.h, tc.body)
		if z != tc.want {
			t.Fatalf("%s: compressed = %v, want %v", tc.name, z, tc.want)
		}
		if !z {
			if !bytes.Equal(out, tc.body) {
				t.Fatalf("%s: body changed without compression", tc.name)
			}
			continue
		}
		back, err := c.Decompress(out)
		if err != nil || !bytes.Equal(back, tc.body) || len(out) >= len(tc.body) {
			t.Fatalf("%s: %d -> %d bytes, back %v", tc.name, len(tc.body), len(out), err)
		}
	}
	if _, err := c.Decompress([]byte("not zstd")); err == nil {
		t.Fatal("Decompress of garbage: want an error")
	}
}

// BenchmarkCompressParallel compresses the bench's ~200-byte JSON response
// from every P at once, as concurrent Completes do.
func BenchmarkCompressParallel(b *testing.B) {
	c, err := store.NewBodyCodec()
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"id":"ord_0123456789abcdef","status":"created","amount":{"value":1999,"currency":"EUR"},"customer":"cus_0123456789","items":[{"sku":"sku-1","quantity":2},{"sku":"sku-2","quantity":1}],"created_at":"2026-12-01T12:00:00Z"}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Compress(nil, body)
		}
	})
}
