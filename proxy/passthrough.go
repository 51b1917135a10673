package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
)

// passthroughServe proxies a request that is not enforced, untouched and
// streamed, through httputil.ReverseProxy; a small body is read first
// (bufferSmallBody).
func (p *Proxy) passthroughServe(w http.ResponseWriter, r *http.Request, ex *exchange) {
	if err := bufferSmallBody(r, ex); err != nil {
		// Nothing was sent upstream: the client's body ended early or
		// did not come in time.
		ex.cause = err
		p.fail(w, ex, problem.BadRequest.With("the request body could not be read: "+err.Error()))
		return
	}
	// ReverseProxy aborts the handler with http.ErrAbortHandler when the
	// client leaves mid-stream; ServeHTTP's deferred completion still
	// counts the request.
	ex.outcome = metrics.OutcomePassthrough
	if ex.next != nil {
		if len(ex.plan.Tombstones) > 0 {
			// In process no ModifyResponse sees the answer: the writer
			// tombstones as modifyPassthrough does, and a handler that
			// returns having written nothing is net/http's implicit 200,
			// unless its host answers an error it returned (HostAnswers).
			tw := &tombstoneWriter{ResponseWriter: w, p: p, ex: ex, ctx: r.Context()}
			ex.next.ServeHTTP(tw, r)
			if !ex.hostAnswers {
				tw.decide(http.StatusOK)
			}
			return
		}
		ex.next.ServeHTTP(w, r)
		return
	}
	// A streamed body is still the transport's when the upstream may
	// already be answering: net/http's HTTP/1 server closes the request
	// body when the response header is written unless the handler is full
	// duplex, and the transport, reading the body once more past its
	// declared length, then fails and closes the connection the answer is
	// arriving on, cutting it (golang/go#40747; a few large answers in a
	// hundred on a loaded machine, TestPassthroughStreamedBodyAnswerArrivesWhole).
	// HTTP/2 is full duplex already (ErrNotSupported).
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		p.log.Warn("passthrough: full duplex", "err", err)
	}
	p.passthrough.ServeHTTP(w, r)
}

// maxBufferedPassthrough is the largest declared body, in bytes, that a
// passthrough request has read before it is sent upstream
// (bufferSmallBody), of the order of nginx's client_body_buffer_size (two
// memory pages: 8 KiB on x86-64, 16 KiB on most other 64-bit platforms),
// which nginx also reads before it forwards. A client that declares it and
// then sends nothing pins at most that much until the server's read
// timeout.
const maxBufferedPassthrough = 16 << 10

// bufferSmallBody reads the body of a passthrough request that declares a
// Content-Length of at most maxBufferedPassthrough into memory, and makes
// r.Body those bytes. net/http's transport sends a request whose body is in
// memory with its header in one write(2); any other body it sends after
// flushing the header on its own (net/http's transferWriter.FlushHeaders,
// golang/go#22088), which costs one more write and one more TCP segment,
// on both ends, for every request with a body. The bytes sent upstream are
// the same. Left streamed: larger bodies, bodies of unknown length
// (chunked), a body already read (ex.read), and a request that expects
// 100 Continue, whose upstream decides whether it wants the body.
//
// It returns the read error when the client's body ends before its
// Content-Length or does not arrive within the server's read timeout; the
// request then never reached the upstream.
func bufferSmallBody(r *http.Request, ex *exchange) error {
	if ex.read || r.ContentLength <= 0 || r.ContentLength > maxBufferedPassthrough ||
		len(r.TransferEncoding) > 0 || r.Header.Get("Expect") != "" {
		return nil
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return err
	}
	// rewrite sends ex.body.
	ex.body, ex.read = body, true
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// passthroughError is the passthrough ReverseProxy's ErrorHandler: the
// request was not enforced, so nothing is claimed or released; the client
// gets a problem (or, when it left, nothing).
func (p *Proxy) passthroughError(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Warn("passthrough upstream exchange failed", "method", r.Method, "path", r.URL.Path, "err", err)
	ex := exchangeOf(r.Context())
	if ex != nil {
		ex.cause = err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		p.answerProblem(w, r, ex, problem.UpstreamTimeout.With("the upstream did not answer in time"))
		return
	}
	if errors.Is(err, context.Canceled) {
		w.WriteHeader(statusClientClosed) // client went away; nobody reads this
		return
	}
	p.answerProblem(w, r, ex, problem.UpstreamUnreachable.With("the upstream exchange failed"))
}

// HostAnswers tells the engine that the handler serving r, a request the
// engine passes through to it in process, returned an error that its host
// answers (a Caddy handler's error, which handle_errors or Caddy's own
// error page turns into the response). Having written nothing, the
// handler then did not answer net/http's implicit 200, so a tombstone rule
// (resource_from) does not fire on it. It reports whether r is such a
// request; call it from the handler's goroutine, before it returns.
func HostAnswers(r *http.Request) bool {
	ex := exchangeOf(r.Context())
	if ex == nil || ex.next == nil {
		return false
	}
	ex.hostAnswers = true
	return true
}
