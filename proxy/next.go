package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"time"
)

// The engine in process: with Options.Next the handler takes the place of
// the upstream, and the engine's contract with it is the proxy's with an
// upstream, in these terms:
//
//   - A claimed request runs the handler once, on the request's goroutine,
//     with a context detached from the client and bounded by Timeout, as an
//     upstream call is; the body it reads is the bytes the fingerprint
//     covered. A heartbeat extends the claim while it runs. A failure it
//     answers once that deadline has ended its context (a status that is
//     not replayable, a transient grpc-status) leaves the outcome unknown,
//     as the proxy's upstream-timeout does: the claim is kept until its
//     lease ends.
//   - What the handler writes is captured: status, header, body and the
//     trailers it declared (a "Trailer" field, or http.TrailerPrefix), and
//     decided as an upstream's answer is (a replayable status is stored and
//     sent; any other releases the key and is sent; gRPC by grpc-status).
//   - The response reaches the client when the handler returns: the engine
//     decides what to store from the whole response. Flush is accepted and
//     does nothing; a body longer than the route's max_response_bytes is
//     delivered once and not retained, as the proxy does with a response
//     too large to store. A stream without end (server-sent events) belongs
//     on a route that does not enforce, where the handler writes to the
//     client directly.
//   - A handler that panics has its claim kept until its lease ends, and
//     on_abandoned decides then, as for an upstream that took the request
//     and cut the connection (net/http does that to a client of a handler
//     that panics): a panic says nothing of what ran before it, an
//     INSERT before an index out of range included
//     (TestPanicKeepsTheClaim). The panic goes on up the stack, as
//     net/http expects of a handler. A handler that reported NothingDone
//     before it panicked has its claim released.
//   - A handler tells the engine what its answer cannot (outcome.go):
//     NothingDone (it refused the request before acting: released,
//     whatever it writes), OutcomeUnknown (it may have acted and does not
//     know the result: nothing stored, the claim kept, the client
//     answered 502 upstream-failed or 504 upstream-timeout, as the
//     proxy answers for its upstream). A status that is not replayable
//     written before acting releases the key, as an upstream's does.
//   - A handler that ignores its context and answers a success after
//     upstream.timeout is stored and replayed: it ran to its end under
//     the claim (the heartbeat kept it), so its outcome is known, and
//     storing it runs nothing twice. The proxy answers 504 at that
//     deadline only because it stops reading its upstream there and
//     never learns the answer; in process the engine cannot stop the
//     handler, waits for it, and has the answer
//     (TestInProcessLateSuccessIsStored).
//   - Hijack is not supported on an enforced route: the captured writer
//     has no connection to hand over, and http.ResponseController's
//     Hijack returns http.ErrNotSupported; what the handler then writes
//     decides, as any answer.
//   - An engine in process that finds itself inside another one's call
//     (two middlewares nested around one handler) passes the request to
//     its handler untouched, without access line or metrics: the outer
//     engine's claim already covers it, and claiming again would wait
//     on that claim until wait_timeout (TestNestedMiddlewaresRunOnce).
//     Only the call's own request passes so (handlerCall.covers); another
//     request the handler makes during the call, under its context, is
//     enforced as any (TestInnerEngineEnforcesAnotherRequest).
//   - Requests a route does not enforce go to the handler as they came.

// handlerTransport is the http.RoundTripper of a Proxy with Options.Next:
// it runs the handler on the caller's goroutine and returns what it wrote
// as a response. The handler is the request's exchange's (ServeNext), else
// next.
type handlerTransport struct{ next http.Handler }

// handlerPanic is the error of a handler that panicked: forward keeps
// the claim (releases it when the handler reported NothingDone) and
// panics again with value.
type handlerPanic struct{ value any }

func (e *handlerPanic) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

// RoundTrip runs the handler for req. The request counts as sent the
// moment the handler starts (httptrace GotConn), so a handler that fails
// in any way leaves the outcome to what it wrote and reported
// (handlerCall).
func (t handlerTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{})
	}
	// A writer of its own for each call, never pooled: a handler that
	// keeps it past its return (a goroutine that writes later) must not
	// write into another request's response, which may be another
	// principal's and is stored (TestInProcessLateWriteNeverReachesAnotherRequest).
	c := &capture{header: make(http.Header)}
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, &handlerPanic{value: v}
		}
	}()
	next := t.next
	if ex := exchangeOf(req.Context()); ex != nil && ex.next != nil {
		next = ex.next
	}
	next.ServeHTTP(c, req)
	return c.response(req), nil
}

// Captured reports whether w is the writer the engine in process gives
// its handler on a call it decides on, or wraps it (Unwrap, followed as
// http.ResponseController follows it): what the handler writes there is
// captured, and decided on when the handler returns (stored and sent, or
// the key released and sent, or nothing stored on an unknown outcome),
// never sent as written. It is false for the client's own writer, which
// the handler gets on a request no route enforces. A handler that may
// return an error having written nothing (a Caddy handler) asks it to know
// whether the engine would take that nothing for net/http's implicit 200
// and store it as a success, so that it answers the error itself, or
// whether the error can go back to its host as it was.
func Captured(w http.ResponseWriter) bool {
	for w != nil {
		if _, ok := w.(*capture); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}

// capture is the http.ResponseWriter a handler writes to in process.
type capture struct {
	header      http.Header
	sent        http.Header // header as it was at WriteHeader
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

// Header returns the header the handler sets; changes after WriteHeader
// count only for declared trailers, as with net/http.
func (c *capture) Header() http.Header { return c.header }

// WriteHeader records the status once; informational statuses (1xx but
// 101) are dropped, as the proxy drops an upstream's.
func (c *capture) WriteHeader(code int) {
	if code < 100 || code > 999 {
		// As net/http's own writer: a handler bug, not a status to decide on.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if c.wroteHeader || (code >= 100 && code < 200 && code != http.StatusSwitchingProtocols) {
		return
	}
	c.status, c.wroteHeader = code, true
	c.sent = c.header.Clone()
}

// Write appends to the body, sending an implicit 200 first as net/http
// does.
func (c *capture) Write(b []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	return c.body.Write(b)
}

// Flush does nothing: the response reaches the client when the handler
// returns (see the contract above).
func (c *capture) Flush() {}

// response is what the handler wrote as an upstream response: net/http's
// implicit 200 and sniffed Content-Type included, so that a record written
// in process and one written by the proxy in front of the same handler
// hold the same fields.
func (c *capture) response(req *http.Request) *http.Response {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	h := c.sent
	// Not copied: c is this call's own (never pooled), and a handler
	// that writes after it returned only appends past these bytes, to
	// this buffer or a larger one, never over them.
	body := c.body.Bytes()
	if _, set := h["Content-Type"]; !set && len(body) > 0 {
		h.Set("Content-Type", http.DetectContentType(body))
	}
	if len(h["Date"]) == 0 {
		// net/http stamps Date after the handler returns, too late to be
		// stored: stamped here, it is stored and sent, so the first answer
		// and its replays carry the same Date, as for an upstream's. Also
		// over grpc-go's handler, which blanks Date (a nil value): a replay
		// always carries one (net/http's own when the record has none).
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	var trailer http.Header
	for _, v := range h.Values("Trailer") {
		for _, name := range strings.Split(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if values, ok := c.header[name]; ok && name != "" {
				if trailer == nil {
					trailer = make(http.Header)
				}
				trailer[name] = values
			}
		}
	}
	for name, values := range c.header {
		if after, ok := strings.CutPrefix(name, http.TrailerPrefix); ok {
			if trailer == nil {
				trailer = make(http.Header)
			}
			trailer[http.CanonicalHeaderKey(after)] = values
			delete(h, name)
		}
	}
	if len(trailer) > 0 {
		// The trailer's names go with it, as a response read off the wire
		// announces them.
		h.Del("Trailer")
	}
	return &http.Response{
		Status:        strconv.Itoa(c.status) + " " + http.StatusText(c.status),
		StatusCode:    c.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Trailer:       trailer,
		Request:       req,
	}
}

// inProcessRequest is the request a handler in process runs: r as the
// server read it (URL, Host, RequestURI and header, but for what the
// engine removed as hop-by-hop), under ctx, with body (the bytes the
// fingerprint covered) as its body.
func inProcessRequest(ctx context.Context, r *http.Request, body []byte) *http.Request {
	out := r.Clone(ctx)
	out.Body = &sentBody{b: body}
	out.GetBody = nil
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	return out
}
