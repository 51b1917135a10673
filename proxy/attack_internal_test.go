package proxy

import (
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
)

// TestAttackDeclaredLengthDoesNotPreallocate: a client that declares
// Content-Length: N (within max_request_bytes) and then sends nothing, or
// one byte, must not make idemgate allocate N bytes. readLimited sized its
// buffer from the declared length, so each such connection, costing the
// client one header line, pinned up to max_request_bytes of memory until the
// server's read timeout: a few thousand connections exhausted the heap of a
// proxy with the default 1 MiB limit.
func TestAttackDeclaredLengthDoesNotPreallocate(t *testing.T) {
	const declared = 256 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body, err := readLimited(strings.NewReader("x"), declared, 2*declared)
	runtime.ReadMemStats(&after)
	if err != nil || string(body) != "x" {
		t.Fatalf("readLimited = %q, %v; want the one byte sent", body, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("reading a 1-byte body declared as %d bytes allocated %d bytes; want allocation to follow the bytes received", declared, grew)
	}
	// The largest limit must not overflow into reading nothing.
	if got, err := readLimited(strings.NewReader("abc"), -1, math.MaxInt64); err != nil || string(got) != "abc" {
		t.Errorf("limit math.MaxInt64: got %q, %v; want the whole body", got, err)
	}
	// Still exact for bodies that are as long as declared, longer or shorter.
	for _, n := range []int{0, 1, maxPrealloc - 1, maxPrealloc, maxPrealloc + 1, 3*maxPrealloc + 7} {
		data := strings.Repeat("y", n)
		got, err := readLimited(strings.NewReader(data), int64(n), 1<<30)
		if err != nil || string(got) != data {
			t.Errorf("n=%d: got %d bytes, %v", n, len(got), err)
		}
		got, _ = readLimited(io.LimitReader(strings.NewReader(data), int64(n/2)), int64(n), 1<<30)
		if len(got) != n/2 {
			t.Errorf("n=%d cut short: got %d bytes, want %d", n, len(got), n/2)
		}
	}
}
