package proxy

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadLimitedMatchesReadAll checks readLimited against the
// io.ReadAll(io.LimitReader) it replaces, for declared sizes that are
// right, short, long and unknown, and for readers that return one byte at
// a time or the data with the EOF.
func TestReadLimitedMatchesReadAll(t *testing.T) {
	const limit = 16
	for _, n := range []int{0, 1, 15, 16, 17, 40} {
		data := strings.Repeat("x", n)
		want, _ := io.ReadAll(io.LimitReader(strings.NewReader(data), limit+1))
		for _, size := range []int64{-1, 0, int64(n) - 1, int64(n), int64(n) + 1, limit, limit + 1} {
			for name, r := range map[string]func() io.Reader{
				"plain":   func() io.Reader { return strings.NewReader(data) },
				"onebyte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(data)) },
				"dataeof": func() io.Reader { return iotest.DataErrReader(strings.NewReader(data)) },
			} {
				got, err := readLimited(r(), size, limit)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("n=%d size=%d %s: got %q, %v; want %q", n, size, name, got, err, want)
				}
			}
		}
	}
}

// TestReadLimitedError checks that a failing reader's error comes back.
func TestReadLimitedError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom))
	if _, err := readLimited(r, 10, 16); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

// TestReadLimitedDeclaredBodyFitsOnce: a 1 MiB body of its declared
// length ends in a buffer of its size (plus the EOF byte), and reading it
// allocates 1.25 times the body at most, where io.ReadAll's growth
// allocated over twice it, however the reader splits it.
func TestReadLimitedDeclaredBodyFitsOnce(t *testing.T) {
	const n = 1 << 20
	data := bytes.Repeat([]byte("z"), n)
	for name, r := range map[string]func() io.Reader{
		"plain":   func() io.Reader { return bytes.NewReader(data) },
		"halfeof": func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
		"dataeof": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
	} {
		got, err := readLimited(r(), n, n)
		if err != nil || len(got) != n || cap(got) != n+1 {
			t.Fatalf("%s: %d bytes in a buffer of %d, %v; want %d in %d", name, len(got), cap(got), err, n, n+1)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := readLimited(bytes.NewReader(data), n, n); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > n+n/4 {
		t.Errorf("reading a declared %d-byte body allocated %d bytes; want at most 1.25 times the body", n, got)
	}
}

// TestSentBodyLetsGo: the outbound request body reads as the bytes given
// and, once read to the end, no longer holds them, so a response that
// refers to its request does not keep a large request body alive;
// closing it early is harmless.
func TestSentBodyLetsGo(t *testing.T) {
	data := bytes.Repeat([]byte("q"), 100<<10)
	s := &sentBody{b: data}
	got, err := io.ReadAll(iotest.OneByteReader(s))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v; want the %d given", len(got), err, len(data))
	}
	if s.b != nil {
		t.Errorf("after EOF the body still holds %d bytes", cap(s.b))
	}
	if n, err := s.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("read after EOF: %d, %v", n, err)
	}
	if err := (&sentBody{b: data}).Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
