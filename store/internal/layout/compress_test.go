package layout_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/idemgate/idemgate/store/internal/layout"
)

func TestBodyCodec(t *testing.T) {
	c, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	json := bytes.Repeat([]byte(`{"id":"ord_1","status":"created"},`), 20)
	noise := make([]byte, 4096)
	_, _ = rand.Read(noise)
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		want bool
	}{
		{"json", http.Header{"Content-Type": {"application/json"}}, json, true},
		{"small", nil, json[:layout.MinCompressBytes-1], false},
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
	c, err := layout.NewBodyCodec()
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

// jsonBody returns n bytes of a JSON API answer: objects with distinct
// ids and amounts, as a list endpoint or a created resource returns them,
// less repetitive than one object repeated.
func jsonBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"data":[`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"id":"ord_%016x","status":"created","amount":%d,"currency":"EUR","customer":"cus_%08d","created_at":"2026-12-01T12:%02d:%02d Z"},`, i*7919+13, 1000+i*37, i*31, i%60, (i*7)%60)
	}
	return b.Bytes()[:n]
}

// BenchmarkCompressBySize is what compressing a body of each size costs
// on the path of a fresh request (cpu-ns/op: CPU time of the compressing
// thread, which a shared machine does not inflate as it does ns/op) and
// what it saves in the store (saved-bytes, the body less its frame; 0
// when Compress leaves it as it is). docs/performance.md, "Hot path
// budget", weighs the two for MinCompressBytes.
func BenchmarkCompressBySize(b *testing.B) {
	c, err := layout.NewBodyCodec()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{128, 227, 256, 384, 512, 768, 1024, 2048, 4096, 16384} {
		body := jsonBody(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			out, z := c.Compress(nil, body)
			saved := 0
			if z {
				saved = len(body) - len(out)
			}
			b.ReportAllocs()
			// CPU time of this thread, not wall time: on a machine shared
			// with other work the two differ by several times.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start := threadCPU(b)
			for range b.N {
				c.Compress(nil, body)
			}
			b.ReportMetric(float64(threadCPU(b)-start)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(saved), "saved-bytes")
		})
	}
}

// threadCPU returns the CPU time the calling OS thread has used, in ns.
func threadCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1
