package logbuf

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/fastslog"
)

// sink records each write it gets.
type sink struct {
	mu     sync.Mutex
	writes []string
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, string(p))
	return len(p), nil
}

func (s *sink) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.writes...)
}

// TestLinesWaitForTheInterval: lines written within the interval leave in
// one write once it has passed, not one write each and not before.
func TestLinesWaitForTheInterval(t *testing.T) {
	s := &sink{}
	w := New(s, 1<<10, 50*time.Millisecond)
	defer w.Close()
	start := time.Now()
	for i := range 3 {
		if _, err := w.Write([]byte("line " + string(rune('a'+i)) + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.get(); len(got) != 0 && time.Since(start) < 50*time.Millisecond {
		t.Fatalf("written before the interval: %q", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.get()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing written 5 s after the lines")
		}
		time.Sleep(time.Millisecond)
	}
	if got := s.get(); len(got) != 1 || got[0] != "line a\nline b\nline c\n" {
		t.Fatalf("writes %q, want the three lines in one", got)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("flushed after %v, before the interval", took)
	}
}

// TestFullBufferFlushesWholeLines: a line that would not fit flushes what
// is held first, so no line is ever split across writes; a line larger
// than the buffer goes straight through.
func TestFullBufferFlushesWholeLines(t *testing.T) {
	s := &sink{}
	w := New(s, 16, time.Hour)
	for _, l := range []string{"0123456789\n", "abcdefghij\n", strings.Repeat("x", 40) + "\n"} {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"0123456789\n", "abcdefghij\n", strings.Repeat("x", 40) + "\n"}
	if got := s.get(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("writes %q, want %q", got, want)
	}
}

// TestCloseWritesEverything: Close writes what is held (the lines of the
// last requests before exit), and a line logged after Close still
// arrives.
func TestCloseWritesEverything(t *testing.T) {
	s := &sink{}
	w := New(s, 1<<10, time.Hour)
	_, _ = w.Write([]byte("last request\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("after close\n"))
	if got := strings.Join(s.get(), ""); got != "last request\nafter close\n" {
		t.Fatalf("got %q", got)
	}
}

// TestHandlerFlushesWhatMustNotWait: through Handler, the records buffered
// accepts wait, any other (a warning, a start line) is written at once
// with everything held before it, in order; loggers derived with With
// keep the rule.
func TestHandlerFlushesWhatMustNotWait(t *testing.T) {
	s := &sink{}
	w := New(s, 1<<10, time.Hour)
	defer w.Close()
	log := slog.New(Handler(slog.NewJSONHandler(w, nil), w, func(r slog.Record) bool {
		return r.Level == slog.LevelInfo && r.Message == "request"
	})).With("component", "test")
	log.Info("request", "n", 1)
	log.Info("request", "n", 2)
	if got := s.get(); len(got) != 0 {
		t.Fatalf("access lines written at once: %q", got)
	}
	log.Warn("store operation failed")
	got := s.get()
	if len(got) != 1 || strings.Count(got[0], "\n") != 3 || !strings.HasSuffix(got[0], "\"msg\":\"store operation failed\",\"component\":\"test\"}\n") {
		t.Fatalf("writes %q, want both access lines then the warning, in one write", got)
	}
	var b bytes.Buffer
	for _, l := range got {
		b.WriteString(l)
	}
	if i, j := strings.Index(b.String(), `"n":1`), strings.Index(b.String(), `"n":2`); i < 0 || j < i {
		t.Fatalf("access lines out of order: %s", b.String())
	}
}

// TestHandlerTakesLinesAsParts: a line given as its parts (HandleAttrs,
// the access line's way) is buffered or flushed as Handle does it, and
// written as the handler below writes the same record, whether that
// handler takes parts (fastslog) or only records (slog's own).
func TestHandlerTakesLinesAsParts(t *testing.T) {
	tm := time.Date(2026, 12, 6, 9, 30, 0, 0, time.UTC)
	attrs := []slog.Attr{slog.String("method", "POST"), slog.Int("status", 201)}
	for _, fast := range []bool{true, false} {
		s := &sink{}
		w := New(s, 1<<10, time.Hour)
		var below slog.Handler = slog.NewJSONHandler(w, nil)
		if fast {
			below = fastslog.New(w, nil, true)
		}
		h := Handler(below, w, func(r slog.Record) bool { return r.Level == slog.LevelInfo && r.Message == "request" }).(fastslog.AttrsHandler)
		if err := h.HandleAttrs(context.Background(), tm, slog.LevelInfo, "request", attrs); err != nil {
			t.Fatal(err)
		}
		if got := s.get(); len(got) != 0 {
			t.Fatalf("fast %v: the access line written at once: %q", fast, got)
		}
		if err := h.HandleAttrs(context.Background(), tm, slog.LevelWarn, "store operation failed", nil); err != nil {
			t.Fatal(err)
		}
		want := `{"time":"2026-12-06T09:30:00Z","level":"INFO","msg":"request","method":"POST","status":201}` + "\n" +
			`{"time":"2026-12-06T09:30:00Z","level":"WARN","msg":"store operation failed"}` + "\n"
		if got := s.get(); len(got) != 1 || got[0] != want {
			t.Fatalf("fast %v: writes %q, want %q in one write", fast, got, want)
		}
		w.Close()
	}
}
