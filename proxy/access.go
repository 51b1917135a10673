package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/fastslog"
	"github.com/idemgate/idemgate/internal/logdigest"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/store"
)

// exchangeKey carries a request's *exchange in its context, for what sees
// the request alone: rewrite (the route's own upstream), the passthrough
// ErrorHandler (the cause of a failure) and timedTransport (the upstream
// duration).
type exchangeKey struct{}

// exchangeCtx is a request's context with its exchange as the value of
// exchangeKey, as context.WithValue would make it, but held in the
// exchange itself (exchange.ctx), so that carrying the exchange costs the
// request no allocation. Done, Err and Deadline are the parent's own, so
// a context derived from it is cancelled with the request as from any.
type exchangeCtx struct {
	context.Context
	ex *exchange
}

// Value returns the exchange for exchangeKey, the URL the client sent
// for fingerprint.SentURLKey (exchange.sent), and the parent's value for
// any other key.
func (c *exchangeCtx) Value(key any) any {
	switch key.(type) {
	case exchangeKey:
		return c.ex
	case fingerprint.SentURLKey:
		// Answered here, so that the fingerprint of a request of the
		// standalone proxy walks no context chain for it.
		return c.ex.sent
	}
	return c.Context.Value(key)
}

func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// accessWriter counts what the client is sent, for the access log line; it
// unwraps for http.ResponseController (flushes, hijacked upgrades).
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// WriteHeader records the status.
func (w *accessWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write counts the body bytes.
func (w *accessWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap returns the underlying writer (http.ResponseController).
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// timedTransport adds each round trip's time (to the response headers) to
// the exchange of its request, for the access log's upstream_ms.
type timedTransport struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	if ex := exchangeOf(r.Context()); ex != nil {
		ex.upstreamNanos.Add(int64(time.Since(start)))
	}
	return resp, err
}

// accessFields is what the access log adds to exchange.
type accessFields struct {
	w             *accessWriter
	upstreamNanos atomic.Int64
	// cause is the error behind a failed answer (upstream or store), for
	// the access line; never a key or an owner.
	cause error
}

// AccessLogMessage is the message of the access line, one per request
// (docs/operations.md, "Access log"): main buffers these lines and no others
// (internal/logbuf).
const AccessLogMessage = "request"

// accessLog writes the one line per request, enforced or not (docs/operations.md,
// "Access log"): method, path as sent, route, outcome, status and bytes
// sent, durations, the identity's keyHash and the cause of a failure. It is
// off with Options.AccessLog false, or below the info level. now is the
// request's end: the line's time and its duration's end.
func (p *Proxy) accessLog(r *http.Request, ex *exchange, now time.Time) {
	if !p.access || !p.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	status, bytes := ex.status, int64(0)
	if ex.w != nil {
		if ex.w.status != 0 {
			status = ex.w.status
		}
		bytes = ex.w.bytes
	}
	// The record is built here and handed to the handler, as slog's
	// documentation shows for wrappers: Logger.LogAttrs would walk the
	// stack (runtime.Callers) for the caller's PC on every line, 2 % of
	// idemgate's CPU on replays, for a source field the handlers are not
	// configured to print. Typed attributes, added at once: the record holds
	// five and allocates the rest in one slice. A handler that takes the
	// line as its parts (fastslog.AttrsHandler) needs no record; the
	// attributes handed to it through an interface would escape, so their
	// array is pooled.
	buf := accessAttrs.Get().(*[14]slog.Attr)
	defer func() {
		*buf = [14]slog.Attr{} // no request's strings kept alive
		accessAttrs.Put(buf)
	}()
	path := r.URL.EscapedPath()
	if p.logQuery && r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	attrs := append(buf[:0], slog.String("method", r.Method), slog.String("path", path),
		slog.String("route", ex.route.Name), slog.String("outcome", ex.outcome), slog.Int("status", status),
		slog.Int64("bytes", bytes), slog.Int64("duration_ms", now.Sub(ex.start).Milliseconds()))
	if up := ex.upstreamNanos.Load(); up > 0 {
		attrs = append(attrs, slog.Int64("upstream_ms", time.Duration(up).Milliseconds()))
	}
	if ex.id.Key != "" {
		attrs = append(attrs, slog.String("key_hash", keyHash(ex.id)))
	}
	attrs = append(attrs, slog.String("request_id", ex.requestID), slog.String("remote_addr", p.clientAddr(r)))
	if gs := grpcStatusSent(r, ex.w); gs != "" {
		attrs = append(attrs, slog.String("grpc_status", gs))
	}
	if ex.cause != nil {
		attrs = append(attrs, slog.String("err", ex.cause.Error()))
	}
	if h, ok := p.log.Handler().(fastslog.AttrsHandler); ok {
		// The line as its parts: no record to build (cmd/idemgate's
		// handler, internal/fastslog).
		_ = h.HandleAttrs(r.Context(), now, slog.LevelInfo, AccessLogMessage, attrs)
		return
	}
	rec := slog.NewRecord(now, slog.LevelInfo, AccessLogMessage, 0)
	rec.AddAttrs(attrs...)
	_ = p.log.Handler().Handle(r.Context(), rec) // as Logger.LogAttrs, which drops the error too
}

// accessAttrs holds the arrays accessLog builds a line's attributes in.
var accessAttrs = sync.Pool{New: func() any { return new([14]slog.Attr) }}

// keyHash is what a log line shows for the operation of id instead of its
// key or owner: logdigest.OfIdentity, one digest per (owner, scope, key),
// so that the lines of one operation can be followed although clients
// reuse key names across owners.
func keyHash(id store.Identity) string { return logdigest.OfIdentity(id.Owner, id.Scope, id.Key) }

// grpcStatusSent returns the grpc-status w sent to a gRPC call, "" when it
// sent none: a gRPC answer is HTTP 200 whatever its outcome, key reuse and
// a store failure included, so the access line's status alone reads as a
// success. The status is in the header of a trailers-only answer (every
// answer idemgate makes itself) and in the trailers of a forwarded or
// replayed one, which the writer's header map holds once the handler
// returned (under http.TrailerPrefix, as stored: canonical from net/http's
// client, lower case as sent by a next handler). gRPC runs on HTTP/2
// only, so other requests cost one comparison.
func grpcStatusSent(r *http.Request, w *accessWriter) string {
	if r.ProtoMajor != 2 || w == nil {
		return ""
	}
	h := w.Header()
	for _, k := range [...]string{"Grpc-Status", http.TrailerPrefix + "Grpc-Status", http.TrailerPrefix + "grpc-status"} {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
