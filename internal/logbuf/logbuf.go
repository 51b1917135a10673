// Package logbuf buffers log output the way nginx buffers its access log
// (access_log ... buffer=size flush=time): lines collect in memory and
// reach the underlying writer in one write when the buffer fills, when the
// oldest line has waited the flush interval, when a line that must not wait
// is logged (Handler), and at Close. idemgate writes one access line per
// request, and a write(2) per line showed in every profile of its replays
// (docs/performance.md, "Hot path budget").
package logbuf

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/fastslog"
)

// DefaultSize is the buffer a Writer fills before it writes, in bytes:
// nginx's usual access_log buffer is 32-64 KiB.
const DefaultSize = 64 << 10

// DefaultInterval is the longest a line waits in the buffer: short enough
// that `tail -f` and log shippers see a line at once to a person, long
// enough that a busy server writes many lines at a time.
const DefaultInterval = 100 * time.Millisecond

// Writer is an io.Writer that buffers what is written to it and passes it
// on to the underlying writer, whole writes only (a log line is never
// split), at most size bytes late and interval late. It is safe for
// concurrent use. Close it at exit, or the last lines are lost.
type Writer struct {
	mu       sync.Mutex
	out      io.Writer
	buf      []byte
	size     int
	interval time.Duration
	timer    *time.Timer
	armed    bool // the timer will flush
	closed   bool
}

// New returns a Writer on out that flushes at size bytes and interval
// after the first line it holds (DefaultSize and DefaultInterval for
// values <= 0).
func New(out io.Writer, size int, interval time.Duration) *Writer {
	if size <= 0 {
		size = DefaultSize
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Writer{out: out, size: size, interval: interval, buf: make([]byte, 0, size)}
}

// Write buffers p, or writes it through when it is larger than the buffer
// or the Writer is closed. An error is the underlying writer's, from the
// flush this write caused.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(p) >= w.size {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
		return w.out.Write(p)
	}
	if len(w.buf)+len(p) > w.size {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
	}
	w.buf = append(w.buf, p...)
	if !w.armed {
		// One timer per interval with lines, not one per line.
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(w.interval, w.tick)
		} else {
			w.timer.Reset(w.interval)
		}
	}
	return len(p), nil
}

func (w *Writer) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	_ = w.flushLocked() // nobody to tell; the next Write or Flush sees it again
}

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.out.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// Close flushes what is buffered and stops the timer; later writes go
// straight through, so a line logged after Close is not lost either.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	return w.flushLocked()
}

// Handler returns h, which writes to w, with w flushed after every record
// for which buffered reports false: the lines an operator waits for
// (warnings, errors, a reload, the start) leave at once, and only the
// lines buffered accepts (the per-request access line) wait.
func Handler(h slog.Handler, w *Writer, buffered func(slog.Record) bool) slog.Handler {
	return &handler{Handler: h, w: w, buffered: buffered}
}

type handler struct {
	slog.Handler
	w        *Writer
	buffered func(slog.Record) bool
}

// Handle implements slog.Handler.
func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if !h.buffered(r) {
		if ferr := h.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// HandleAttrs implements fastslog.AttrsHandler: the record of t, level,
// msg and attrs, handed as its parts to a handler that takes them so,
// else as a slog.Record. buffered is asked about the record without its
// attributes.
func (h *handler) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	var err error
	if ah, ok := h.Handler.(fastslog.AttrsHandler); ok {
		err = ah.HandleAttrs(ctx, t, level, msg, attrs)
	} else {
		r := slog.NewRecord(t, level, msg, 0)
		r.AddAttrs(attrs...)
		err = h.Handler.Handle(ctx, r)
	}
	if !h.buffered(slog.NewRecord(t, level, msg, 0)) {
		if ferr := h.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// WithAttrs implements slog.Handler.
func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(attrs), w: h.w, buffered: h.buffered}
}

// WithGroup implements slog.Handler.
func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), w: h.w, buffered: h.buffered}
}
