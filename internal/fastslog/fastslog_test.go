package fastslog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// logBoth logs the same record through New and through slog's own handler
// of the same format and returns both outputs; got holds the line twice
// when New's handler also takes it as parts (HandleAttrs), and want then
// twice too.
func logBoth(t testing.TB, json bool, opts *slog.HandlerOptions, with []slog.Attr, group string, r slog.Record) (got, want string) {
	t.Helper()
	var a, b bytes.Buffer
	fast := New(&a, opts, json)
	var std slog.Handler
	if json {
		std = slog.NewJSONHandler(&b, opts)
	} else {
		std = slog.NewTextHandler(&b, opts)
	}
	if len(with) > 0 {
		fast, std = fast.WithAttrs(with), std.WithAttrs(with)
	}
	if group != "" {
		fast, std = fast.WithGroup(group), std.WithGroup(group)
	}
	if err := fast.Handle(context.Background(), r.Clone()); err != nil {
		t.Fatal(err)
	}
	if err := std.Handle(context.Background(), r.Clone()); err != nil {
		t.Fatal(err)
	}
	if ah, ok := fast.(AttrsHandler); ok {
		var attrs []slog.Attr
		r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a); return true })
		if err := ah.HandleAttrs(context.Background(), r.Time, r.Level, r.Message, attrs); err != nil {
			t.Fatal(err)
		}
		if err := std.Handle(context.Background(), r.Clone()); err != nil {
			t.Fatal(err)
		}
	}
	return a.String(), b.String()
}

func record(tm time.Time, level slog.Level, msg string, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(tm, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

// TestSameBytesAsSlog: every record, the ones handled here and the ones
// handed to slog, comes out as slog's handler writes it, in both formats.
func TestSameBytesAsSlog(t *testing.T) {
	tm := time.Date(2026, 12, 6, 9, 4, 5, 120_000_000, time.FixedZone("X", 3600))
	access := []slog.Attr{slog.String("method", "POST"), slog.String("path", "/v1/orders?a=b&c=%20"),
		slog.String("route", "default"), slog.String("outcome", "replayed"), slog.Int("status", 201),
		slog.Int64("bytes", 178), slog.Int64("duration_ms", 0), slog.String("key_hash", "8254c329a928"),
		slog.String("request_id", "0b7e4c2a-1"), slog.String("remote_addr", "127.0.0.1")}
	cases := []struct {
		name  string
		r     slog.Record
		with  []slog.Attr
		group string
	}{
		{name: "access line", r: record(tm, slog.LevelInfo, "request", access...)},
		{name: "monotonic and nanoseconds", r: record(time.Now(), slog.LevelInfo, "request", access...)},
		{name: "whole second", r: record(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), slog.LevelWarn, "w")},
		{name: "no attributes", r: record(tm, slog.LevelError, "stopped")},
		{name: "custom level", r: record(tm, slog.LevelInfo+2, "x")},
		{name: "escapes", r: record(tm, slog.LevelInfo, "a \"quoted\"\tmsg\n",
			slog.String("err", `dial tcp 127.0.0.1:1: connect: "refused" \ back`), slog.String("ctl", "a\x00b\x1fc\x7f"),
			slog.String("empty", ""), slog.String("eq", "a=b"), slog.String("bs", `a\b`), slog.String("k y", "v"))},
		{name: "numbers and bools", r: record(tm, slog.LevelDebug-4, "n", slog.Int64("neg", -42), slog.Uint64("u", 1<<63),
			slog.Bool("t", true), slog.Bool("f", false))},
		{name: "with attrs", r: record(tm, slog.LevelInfo, "request", access...), with: []slog.Attr{slog.String("component", "proxy"), slog.Int("n", 3)}},
		{name: "falls back: non-ASCII", r: record(tm, slog.LevelInfo, "request", slog.String("path", "/caf\u00e9\u2028\xff"))},
		{name: "falls back: error", r: record(tm, slog.LevelInfo, "m", slog.Any("err", errors.New("boom")))},
		{name: "falls back: duration, float, time", r: record(tm, slog.LevelInfo, "m", slog.Duration("d", time.Second),
			slog.Float64("f", 1.5), slog.Time("t", tm))},
		{name: "falls back: group", r: record(tm, slog.LevelInfo, "m", slog.Group("g", slog.String("a", "b")))},
		{name: "falls back: empty key", r: record(tm, slog.LevelInfo, "m", slog.String("", "v"), slog.Attr{})},
		{name: "falls back: zero time", r: record(time.Time{}, slog.LevelInfo, "m", slog.String("a", "b"))},
		{name: "falls back: with non-simple attrs", r: record(tm, slog.LevelInfo, "m", slog.String("a", "b")), with: []slog.Attr{slog.Any("x", []int{1})}},
		{name: "falls back: with group", r: record(tm, slog.LevelInfo, "m", slog.String("a", "b")), with: []slog.Attr{slog.String("c", "d")}, group: "g"},
	}
	for _, c := range cases {
		for _, json := range []bool{true, false} {
			got, want := logBoth(t, json, nil, c.with, c.group, c.r)
			if got != want {
				t.Errorf("%s (json %v):\n got %q\nwant %q", c.name, json, got, want)
			}
		}
	}
}

// TestLevelAndOptions: the level filter is slog's, and ReplaceAttr or
// AddSource leave everything to slog.
func TestLevelAndOptions(t *testing.T) {
	var buf bytes.Buffer
	h := New(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}, true)
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelWarn) {
		t.Fatal("level filter is not slog's")
	}
	if _, ok := New(&buf, &slog.HandlerOptions{AddSource: true}, true).(*Handler); ok {
		t.Fatal("AddSource not left to slog")
	}
	rep := func(_ []string, a slog.Attr) slog.Attr { return a }
	if _, ok := New(&buf, &slog.HandlerOptions{ReplaceAttr: rep}, false).(*Handler); ok {
		t.Fatal("ReplaceAttr not left to slog")
	}
}

// FuzzSameBytesAsSlog compares any message, key and string value.
func FuzzSameBytesAsSlog(f *testing.F) {
	f.Add("request", "path", "/v1/a?b=c", int64(7), true)
	f.Add("", "", "", int64(-1), false)
	f.Add("a\"b", "k=y", "x\\y\x01 z", int64(0), true)
	tm := time.Date(2026, 12, 6, 9, 4, 5, 999_999_999, time.UTC)
	f.Fuzz(func(t *testing.T, msg, key, val string, n int64, json bool) {
		r := record(tm, slog.LevelInfo, msg, slog.String(key, val), slog.Int64("n", n), slog.String("k2", key))
		if got, want := logBoth(t, json, nil, []slog.Attr{slog.String(key, val)}, "", r); got != want {
			t.Errorf("got %q\nwant %q", got, want)
		}
	})
}

func BenchmarkAccessLine(b *testing.B) {
	tm := time.Now()
	attrs := []slog.Attr{slog.String("method", "POST"), slog.String("path", "/v1/orders"),
		slog.String("route", "default"), slog.String("outcome", "replayed"), slog.Int("status", 201),
		slog.Int64("bytes", 178), slog.Int64("duration_ms", 0), slog.String("key_hash", "8254c329a928"),
		slog.String("request_id", "0b7e4c2a-1"), slog.String("remote_addr", "127.0.0.1")}
	for _, bc := range []struct {
		name string
		h    slog.Handler
	}{{"slog", slog.NewJSONHandler(discard{}, nil)}, {"fastslog", New(discard{}, nil, true)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := slog.NewRecord(tm, slog.LevelInfo, "request", 0)
				r.AddAttrs(attrs...)
				_ = bc.h.Handle(context.Background(), r)
			}
		})
	}
}

// BenchmarkAccessLineAttrs is the access line given as its parts
// (HandleAttrs): no slog.Record, no allocation.
func BenchmarkAccessLineAttrs(b *testing.B) {
	tm := time.Now()
	attrs := []slog.Attr{slog.String("method", "POST"), slog.String("path", "/v1/orders"),
		slog.String("route", "default"), slog.String("outcome", "replayed"), slog.Int("status", 201),
		slog.Int64("bytes", 178), slog.Int64("duration_ms", 0), slog.String("key_hash", "8254c329a928"),
		slog.String("request_id", "0b7e4c2a-1"), slog.String("remote_addr", "127.0.0.1")}
	h := New(discard{}, nil, true).(AttrsHandler)
	b.ReportAllocs()
	for b.Loop() {
		_ = h.HandleAttrs(context.Background(), tm, slog.LevelInfo, "request", attrs)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
