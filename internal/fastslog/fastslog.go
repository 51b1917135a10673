// Package fastslog is a slog.Handler that writes what slog's JSONHandler
// or TextHandler writes, byte for byte, for the records idemgate logs on
// every request, at a fraction of their cost. idemgate writes one access
// line per request at info (docs/operations.md, "Access log"), and slog's
// handlers spent about 1.6 µs on each, an eighth of idemgate's CPU on a
// cached replay (docs/performance.md, "Hot path budget"): a value walk
// through Resolve, a deferred recover per attribute and two pooled buffers
// per line. Here a record whose attributes are strings, integers and
// booleans of ASCII text, with ASCII keys, is appended to one pooled
// buffer by hand; any other record (a group, an error or any other value,
// a non-ASCII string, a zero time) is handed to the slog handler it wraps,
// which writes it as it always did. The output is the same either way,
// which TestSameBytesAsSlog and FuzzSameBytesAsSlog check against slog
// itself.
package fastslog

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler is a slog.Handler over a slog.JSONHandler or slog.TextHandler
// (New); it is safe for concurrent use.
type Handler struct {
	std  slog.Handler // the slog handler, for the records not handled here
	w    *lockedWriter
	json bool
	// pre is the attributes of WithAttrs, encoded, each with its
	// leading separator.
	pre []byte
}

// lockedWriter serialises the writes of a handler and of the slog handler
// it wraps, which share the writer: slog locks its own writes only.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// New returns a handler writing to w in the format of slog.NewJSONHandler
// (json true) or slog.NewTextHandler, with opts as they take them (nil for
// the defaults). With a ReplaceAttr or AddSource in opts, the slog handler
// itself is returned: what those do is for slog to do.
func New(w io.Writer, opts *slog.HandlerOptions, json bool) slog.Handler {
	lw := &lockedWriter{w: w}
	var std slog.Handler
	if json {
		std = slog.NewJSONHandler(lw, opts)
	} else {
		std = slog.NewTextHandler(lw, opts)
	}
	if opts != nil && (opts.ReplaceAttr != nil || opts.AddSource) {
		return std
	}
	return &Handler{std: std, w: lw, json: json}
}

// Enabled is the slog handler's.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.std.Enabled(ctx, l) }

// WithAttrs returns a Handler with as added to every record, or the slog
// handler's own WithAttrs when one of as is not of a kind handled here.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	pre := append([]byte(nil), h.pre...)
	for _, a := range as {
		var ok bool
		if pre, ok = h.appendAttr(pre, a); !ok {
			return h.std.WithAttrs(as)
		}
	}
	return &Handler{std: h.std.WithAttrs(as), w: h.w, json: h.json, pre: pre}
}

// WithGroup is the slog handler's: groups are for slog to write.
func (h *Handler) WithGroup(name string) slog.Handler { return h.std.WithGroup(name) }

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooled is the largest buffer put back in the pool, as slog's own
// buffer pool bounds it: a rare long line does not stay pinned.
const maxPooled = 16 << 10

// Handle writes r, or hands it to the slog handler when it holds what
// only slog writes.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	return h.handle(ctx, r.Time, r.Level, r.Message, nil, &r)
}

// AttrsHandler is a slog.Handler that also writes a record given as its
// parts, attrs in order: what a caller logging a fixed set of attributes
// (the access line) calls instead of building a slog.Record, which
// allocates for more than five attributes. Handler implements it, and so
// does logbuf's handler over one.
type AttrsHandler interface {
	slog.Handler
	HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error
}

// HandleAttrs writes the record of t, level, msg and attrs as Handle
// writes it.
func (h *Handler) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	return h.handle(ctx, t, level, msg, attrs, nil)
}

// handle writes the record r, or when r is nil the one of t, level, msg
// and attrs, or hands it to the slog handler.
func (h *Handler) handle(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr, r *slog.Record) error {
	std := func() error {
		if r != nil {
			return h.std.Handle(ctx, *r)
		}
		rec := slog.NewRecord(t, level, msg, 0)
		rec.AddAttrs(attrs...)
		return h.std.Handle(ctx, rec)
	}
	if y := t.Year(); t.IsZero() || y < 0 || y >= 10000 {
		return std()
	}
	bp := bufPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooled {
			*bp = (*bp)[:0]
			bufPool.Put(bp)
		}
	}()
	b, ok := h.appendHead((*bp)[:0], t, level, msg)
	switch {
	case !ok:
	case r == nil:
		for _, a := range attrs {
			if b, ok = h.appendAttr(b, a); !ok {
				break
			}
		}
	default:
		r.Attrs(func(a slog.Attr) bool {
			b, ok = h.appendAttr(b, a)
			return ok
		})
	}
	*bp = b
	if !ok {
		return std()
	}
	if h.json {
		b = append(b, '}')
	}
	b = append(b, '\n')
	*bp = b
	_, err := h.w.Write(b)
	return err
}

// appendHead appends the time, level and message of a record, and the
// attributes of WithAttrs, as slog's handler would write them; ok is false
// when it cannot.
func (h *Handler) appendHead(b []byte, t time.Time, level slog.Level, msg string) (_ []byte, ok bool) {
	t = t.Round(0) // as slog: no monotonic reading
	if h.json {
		b = append(b, `{"time":"`...)
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","level":`...)
	} else {
		b = append(b, "time="...)
		b = appendRFC3339Millis(b, t)
		b = append(b, " level="...)
	}
	if b, ok = h.appendString(b, level.String()); !ok {
		return b, false
	}
	if h.json {
		b = append(b, `,"msg":`...)
	} else {
		b = append(b, " msg="...)
	}
	if b, ok = h.appendString(b, msg); !ok {
		return b, false
	}
	return append(b, h.pre...), true
}

// appendAttr appends a with its leading separator; ok is false for an
// attribute this package leaves to slog.
func (h *Handler) appendAttr(b []byte, a slog.Attr) (_ []byte, ok bool) {
	if a.Key == "" {
		return b, false // slog elides some, inlines others
	}
	if h.json {
		b = append(b, ',')
	} else {
		b = append(b, ' ')
	}
	if b, ok = h.appendString(b, a.Key); !ok {
		return b, false
	}
	if h.json {
		b = append(b, ':')
	} else {
		b = append(b, '=')
	}
	switch v := a.Value; v.Kind() {
	case slog.KindString:
		return h.appendString(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10), true
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool()), true
	}
	return b, false
}

// appendString appends s as slog's handler writes a string: escaped and
// quoted in JSON, quoted in text when it needs to be. ok is false for a
// string with a byte past ASCII, whose escapes (invalid UTF-8, U+2028,
// unprintable runes) are left to slog.
func (h *Handler) appendString(b []byte, s string) (_ []byte, ok bool) {
	if !h.json {
		quote := len(s) == 0
		for i := 0; i < len(s); i++ {
			switch classOf[s[i]] {
			case nonASCII:
				return b, false
			case quoted, textOnly:
				quote = true
			}
		}
		if quote {
			return strconv.AppendQuote(b, s), true
		}
		return append(b, s...), true
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch classOf[c] {
		case plain, textOnly:
			continue
		case nonASCII:
			return b, false
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\')
		switch c {
		case '\\', '"':
			b = append(b, c)
		case '\n':
			b = append(b, 'n')
		case '\r':
			b = append(b, 'r')
		case '\t':
			b = append(b, 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// byteClass is what a byte of a string asks of each format.
type byteClass uint8

const (
	// plain stands for itself in both formats.
	plain byteClass = iota
	// textOnly is a space or '=': itself in JSON, quoted in text
	// (slog's needsQuoting).
	textOnly
	// quoted is escaped in JSON and makes text quote the string: a
	// control byte or '"' (slog's safeSet).
	quoted
	// backslash is escaped in JSON and left alone by text, which quotes
	// for anything but a backslash.
	backslash
	// nonASCII is left to slog.
	nonASCII
)

// classOf classifies every byte value.
var classOf = func() (t [256]byteClass) {
	for c := range t {
		switch {
		case c >= utf8.RuneSelf:
			t[c] = nonASCII
		case c < 0x20 || c == '"':
			t[c] = quoted
		case c == '\\':
			t[c] = backslash
		case c == ' ' || c == '=':
			t[c] = textOnly
		}
	}
	return t
}()

// appendRFC3339Millis is slog's text handler's time format: RFC 3339 with
// exactly three digits of fraction.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...) // drop the 4th digit
}
