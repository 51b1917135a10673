package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// forward sends a claimed request upstream exactly once and records its
// outcome: Complete for a replayable status, Release when the upstream
// surely did not act (other statuses, connection never made), and nothing
// when the outcome is unknown, so the claim runs out with its lease.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, ex *exchange, token string) {
	route := ex.route
	p.m.ClaimsInFlight(1)
	defer p.m.ClaimsInFlight(-1)

	// Detached from the client: a client that leaves or times out does not
	// cancel the upstream call, so its result is recorded for the retry.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.timeout)
	defer cancel()
	fc := &forwardCall{}
	p.startHeartbeat(&fc.heartbeat, ex, token, false)
	// stopHeartbeat is idempotent: every path below stops it before it
	// answers; the defer covers a panic.
	stopHeartbeat := fc.end
	defer stopHeartbeat()

	// In process the handler reports through its request what its answer
	// cannot say (outcome.go); an engine nested inside finds the call
	// there and passes the request through.
	var call *handlerCall
	if p.next != nil {
		call = &fc.call
		call.claimed = true
		ctx = withCall(ctx, call)
	}
	fc.trace.GotConn = fc.gotConn
	ctx = httptrace.WithClientTrace(ctx, &fc.trace)
	out := p.outbound(ctx, r, ex.body)
	call.of(out, route)
	upStart := time.Now()
	resp, err := p.transport.RoundTrip(out)
	var said sealedCall
	if call != nil {
		said = call.seal()
	}
	if err != nil {
		p.m.Upstream(route.Name, time.Since(upStart))
		stopHeartbeat()
		if hp, ok := err.(*handlerPanic); ok {
			// In process (Options.Next): a handler that panicked recorded
			// nothing, and a panic says nothing of what ran before it
			// (TestPanicKeepsTheClaim): the claim runs out with its lease,
			// unless the handler said it did nothing. The panic goes on
			// either way.
			if said.nothing {
				p.release(r, ex, token)
			} else {
				p.log.Warn("handler panicked; it may have acted before, so the key stays claimed until its lease ends",
					"route", route.Name, "key_hash", keyHash(ex.id), "panic", fmt.Sprint(hp.value))
			}
			panic(hp.value)
		}
		if (!fc.connected.Load() && ctx.Err() == nil) || notSent(err) {
			// No connection was made, so no byte reached the upstream, or
			// an h2c upstream did not speak HTTP/2 (ErrProtocolMismatch):
			// the key is free again.
			p.release(r, ex, token)
			p.upstreamFailed(w, r, ex, unreachableProblem(), err)
			return
		}
		p.upstreamAmbiguous(w, r, ex, ctx, err)
		return
	}
	defer resp.Body.Close()
	if said.unknown || said.nothing { // said.unreachable is nothing done too
		p.m.Upstream(route.Name, time.Since(upStart))
		stopHeartbeat()
		switch {
		case said.unknown:
			// In process: the handler said it may have acted and does not
			// know the result; whatever it wrote is not an outcome.
			p.handlerUnknown(w, r, ex, ctx, said.cause)
		case said.unreachable:
			// In process: the handler could not reach its backend;
			// answered as the proxy answers its own dial failure.
			p.release(r, ex, token)
			p.upstreamFailed(w, r, ex, unreachableProblem(), said.cause)
		default:
			// In process: the handler said it did nothing; its answer is
			// sent as written and decides nothing, not even a tombstone.
			p.release(r, ex, token)
			ex.outcome, ex.status = metrics.OutcomeForwarded, resp.StatusCode
			p.copyResponse(w, r, ex, resp, nil)
		}
		return
	}
	// In process the engine's own deadline reaches the handler as its
	// context's end and cuts it short wherever it was: a failure it then
	// answers says nothing of what it did before, and the proxy in front
	// of the same handler would have answered upstream-timeout at the
	// deadline with the claim kept (TestInProcessDeadlineFailureKeepsTheClaim).
	cutShort := p.next != nil && ctx.Err() != nil
	if cutShort && !route.Replayable(resp.StatusCode) {
		p.m.Upstream(route.Name, time.Since(upStart))
		stopHeartbeat()
		p.upstreamAmbiguous(w, r, ex, ctx, fmt.Errorf("the handler answered %d after upstream.timeout ended its context", resp.StatusCode))
		return
	}
	if route.OutcomeUnknown(resp.StatusCode) {
		// An answer that says nothing of whether the upstream acted
		// (unknown_statuses: a gateway's 504 at its own timeout while the
		// application goes on, a wrapper's 503 for a handler it left
		// running): passed on as it came, neither stored nor released, so
		// a retry is refused until the lease ends and on_abandoned decides,
		// as after an exchange that failed once the request was sent.
		p.m.Upstream(route.Name, time.Since(upStart))
		stopHeartbeat()
		ex.cause = fmt.Errorf("the upstream answered %d, listed in unknown_statuses: it may have acted, so the key stays claimed until its lease ends", resp.StatusCode)
		p.log.Warn("upstream answered a status of unknown outcome", "route", route.Name, "key_hash", keyHash(ex.id), "status", resp.StatusCode)
		ex.outcome, ex.status = metrics.OutcomeUpstreamError, resp.StatusCode
		p.copyResponse(w, r, ex, resp, nil)
		return
	}
	// The request body has gone upstream and is never sent again (no
	// retry resends a claimed request): drop this exchange's references
	// to it, so a large body is not held while the response is read and
	// stored (docs/performance.md, "1 MiB request and response bodies").
	ex.body, r.Body = nil, http.NoBody
	// Before the client hears of the deletion, so a retry of the create
	// it sends next finds the tombstone.
	p.tombstone(r.Context(), ex, resp.StatusCode)

	if !route.Replayable(resp.StatusCode) {
		p.m.Upstream(route.Name, time.Since(upStart))
		stopHeartbeat()
		p.release(r, ex, token)
		ex.outcome, ex.status = metrics.OutcomeForwarded, resp.StatusCode
		p.copyResponse(w, r, ex, resp, nil)
		return
	}

	body, err := readLimited(resp.Body, resp.ContentLength, route.MaxResponseBytes)
	p.m.Upstream(route.Name, time.Since(upStart))
	if err != nil {
		// The upstream answered with a replayable status but the body was
		// cut short: it may have acted, so never store it as success and
		// never free the key at once.
		stopHeartbeat()
		p.upstreamAmbiguous(w, r, ex, ctx, fmt.Errorf("reading the response body: %w", err))
		return
	}
	if p.grpcNotStored(w, r, ex, token, resp, body, ctx, stopHeartbeat) {
		return
	}
	if len(resp.Header["Date"]) == 0 {
		// An upstream that sends no Date (grpc-go's server over HTTP/2):
		// net/http would stamp one at write time, too late to be stored,
		// and each replay would carry another. Stamped here, it is stored
		// and sent, so the first answer and its replays carry the same
		// (TestReplayRepeatsDateTheUpstreamDidNotSend).
		resp.Header["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	// The body was read to its end, so resp.Trailer holds what the
	// upstream sent after it (TestTrailersKeptAndReplayed).
	stored := store.Response{Status: resp.StatusCode, Omitted: true}
	if int64(len(body)) <= route.MaxResponseBytes {
		// resp is this exchange's own and its header is not read again
		// (copyResponse reads it only for an omitted body): it becomes
		// the record's header in place, without StoredHeader's copy.
		stored = store.Response{Status: resp.StatusCode, Header: ownStoredHeader(resp.Header), Body: body, Trailer: StoredTrailer(resp.Trailer)}
	}
	stopHeartbeat()
	ex.completing = time.Now()
	recorded, pc := p.complete(r, ex, token, stored)
	if pc != nil && answersOnlyRecorded(route) {
		if recorded = p.awaitRecorded(r, pc); !recorded {
			p.notRecordedYet(w, ex)
			return
		}
	}
	if recorded {
		p.index(r, ex, &stored)
	}
	ex.outcome, ex.status = metrics.OutcomeForwarded, resp.StatusCode
	if stored.Omitted {
		p.log.Warn("response larger than max_response_bytes: streamed once, not retained",
			"route", route.Name, "key_hash", keyHash(ex.id), "max_response_bytes", route.MaxResponseBytes)
		p.copyResponse(w, r, ex, resp, body)
	} else {
		p.m.StoredResponse(route.Name, len(body))
		p.writeStored(w, r, ex, &stored, false)
	}
}

// complete records the response; the caller has stopped the heartbeat, so
// no Extend races the Complete and reports a lost claim. When the store
// refuses, the response is recorded in the background (completeLater),
// with a heartbeat again: while the store cannot be reached nobody can take
// the claim over, and Complete still acts past the lease end as long as
// nobody has (store contract, rule 3). A completion the replicas did not
// acknowledge (store.ErrNotAcknowledged) takes the same path: the repeated
// Complete re-confirms it with the same token (rule 3's exception), and
// completes it for real if a failover lost it meanwhile. Whether the client
// gets the response before it is recorded is the caller's decision
// (answersOnlyRecorded).
//
// It reports whether the record now holds resp, and returns the pending
// completion when the store refused.
func (p *Proxy) complete(r *http.Request, ex *exchange, token string, resp store.Response) (bool, *pendingCompletion) {
	ctx := p.storeCtx(r.Context())
	ok, err := p.store.Complete(ctx, ex.id, token, resp)
	ctx.cancel()
	if err != nil {
		p.noteStoreError()
		p.log.Warn("could not record the response yet; retrying in the background",
			"route", ex.route.Name, "key_hash", keyHash(ex.id), "err", err,
			"not_acknowledged", errors.Is(err, store.ErrNotAcknowledged))
		return false, p.completeLater(r, ex, token, resp)
	}
	if !ok {
		p.logClaimLost(ex.id)
	}
	return ok, nil
}

// answersOnlyRecorded reports whether a response the store refused to
// record is withheld from the client until it is recorded. On a takeover
// route it is: only this process's memory holds it, and if the process
// dies before the store has it (SIGKILL, OOM, node loss while the store is
// away or its replicas do not acknowledge), the claim is abandoned and a
// retry takes it over and runs the operation again, after its client was
// told the first run's result. Withheld, that client never saw a result,
// and the second run is the takeover the route chose for an unknown
// outcome. On a reject route no retry ever runs an abandoned claim again,
// and on a fail_open route the operator chose answers over protection
// while the store is away: both get the response at once.
func answersOnlyRecorded(route *policy.Route) bool {
	return route.OnAbandoned == policy.AbandonedTakeover && route.OnStoreError == policy.FailClosed
}

// awaitRecorded waits for pc, a response the store refused, to be recorded
// in the background, at most the store timeout (the longest a request
// waits on one store answer) and while the client stays; it reports
// whether the store now holds it.
func (p *Proxy) awaitRecorded(r *http.Request, pc *pendingCompletion) bool {
	t := time.NewTimer(p.storeTimeout)
	defer t.Stop()
	select {
	case <-pc.done:
		return pc.end == pendingRecorded // written before done was closed
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

// errNotRecordedYet is the cause of the answer notRecordedYet writes.
var errNotRecordedYet = fmt.Errorf("the upstream answered, but the response could not be recorded yet: %w", store.ErrUnavailable)

// notRecordedYet answers a request whose upstream call ran but whose
// response the store has not recorded (answersOnlyRecorded): 503
// store-unavailable with Retry-After, as any refusal while the store is
// away. The response stays pending on this instance: a retry here records
// it first and gets it replayed, and one elsewhere finds the claim held
// until then (the heartbeat keeps it).
func (p *Proxy) notRecordedYet(w http.ResponseWriter, ex *exchange) {
	ex.cause = errNotRecordedYet
	p.fail(w, ex, withRetry(problem.StoreUnavailable.With(
		"the request was processed, but the idempotency store could not record its response yet; retry with the same key to get it replayed once it is recorded (the request is not forwarded again while this instance holds the response)"), 1))
}

// logClaimLost logs a Complete that found the record no longer held by its
// token (taken over, or purged by an operator). Records are kept by scope,
// not by route, so the line names the scope.
func (p *Proxy) logClaimLost(id store.Identity) {
	p.log.Warn("claim lost before completion; response not recorded", "scope", id.Scope, "key_hash", keyHash(id))
}

func (p *Proxy) release(r *http.Request, ex *exchange, token string) {
	ctx := p.storeCtx(r.Context())
	defer ctx.cancel()
	if _, err := p.store.Release(ctx, ex.id, token); err != nil {
		p.noteStoreError()
		// The claim then ends with its lease; nothing runs twice.
		p.log.Warn("release failed; the key stays claimed until its lease ends",
			"route", ex.route.Name, "key_hash", keyHash(ex.id), "err", err)
	}
}

// forwardCall is what one claimed forward keeps beside its request, in
// one allocation where they took four (five in process): the lease's
// heartbeat; whether the upstream call got a connection (its
// ClientTrace's GotConn), which tells a request never sent from one that
// may have reached the upstream; and in process the handler's call, which
// its reports reach (outcome.go).
type forwardCall struct {
	heartbeat
	connected atomic.Bool
	trace     httptrace.ClientTrace
	call      handlerCall
}

// gotConn marks the call connected. In process it runs for the handler's
// start (handlerTransport, without a connection) and for every request
// the handler makes under its context: a connection of a real transport
// says the handler reached a backend (Reached).
func (f *forwardCall) gotConn(info httptrace.GotConnInfo) {
	f.connected.Store(true)
	if info.Conn != nil {
		f.call.reached.Store(true)
	}
}

// heartbeatWith starts a heartbeat (startHeartbeat) and returns its stop
// function.
func (p *Proxy) heartbeatWith(ex *exchange, token string, keepOnLost bool) func() {
	h := &heartbeat{}
	p.startHeartbeat(h, ex, token, keepOnLost)
	return h.end
}

// startHeartbeat starts h, a zero heartbeat, which extends the lease every
// lease/3 until h.end is called (end waits for the heartbeat goroutine to
// end). A slow upstream keeps its claim; a dead proxy's claim ends one
// lease later. It stops by itself when an Extend finds the claim gone,
// unless keepOnLost: then it goes on after an Extend that found the
// record no longer running with token. completeLater needs that: a
// completion made but not acknowledged leaves the record completed on the
// primary (Extend answers false), yet a failover may bring back the
// running record, whose lease must then keep being extended until the
// repeated Complete lands.
func (p *Proxy) startHeartbeat(h *heartbeat, ex *exchange, token string, keepOnLost bool) {
	lease := ex.route.Lease
	interval := lease / 3
	if interval <= 0 {
		interval = lease
	}
	h.p, h.ex, h.token, h.keepOnLost, h.lease, h.interval = p, ex, token, keepOnLost, lease, interval
	h.running.Add(1)
	// The goroutine and its ticker start only once a first interval has
	// passed: most forwards end well within lease/3, and starting both
	// for every one of them cost about 1.3 % of the fresh-key CPU
	// (docs/performance.md, "Hot path targets"). The first Extend
	// still comes at lease/3, the next ones every lease/3 after it.
	h.timer = time.AfterFunc(interval, h.run)
}

// heartbeat is one startHeartbeat: what run needs, where a closure over
// channels made six allocations per claimed forward. Its stop channel is
// made by run, which most forwards never start.
type heartbeat struct {
	p               *Proxy
	ex              *exchange
	token           string
	keepOnLost      bool
	lease, interval time.Duration
	timer           *time.Timer
	// running is done when run has returned; waited on only when the
	// timer could not be stopped (run started or is about to).
	running sync.WaitGroup
	mu      sync.Mutex
	ended   bool          // end was called
	stop    chan struct{} // made by run unless ended; closed by end
}

// run extends the lease every interval until end is called, or an Extend
// finds the claim gone (unless keepOnLost).
func (h *heartbeat) run() {
	defer h.running.Done()
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	stop := make(chan struct{})
	h.stop = stop
	h.mu.Unlock()
	p, ex := h.p, h.ex
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(h.interval, p.storeTimeout))
		ok, err := p.store.Extend(ctx, ex.id, h.token, h.lease)
		cancel()
		if err != nil {
			p.noteStoreError()
		}
		if err == nil && !ok && h.keepOnLost {
			p.log.Debug("lease extension found the record not running; kept until the response is recorded",
				"route", ex.route.Name, "key_hash", keyHash(ex.id))
		} else if err != nil || !ok {
			p.m.HeartbeatFailure(ex.route.Name)
			p.log.Warn("lease extension failed", "route", ex.route.Name, "key_hash", keyHash(ex.id), "lost", err == nil, "err", err)
			if err == nil {
				return // the claim is gone; extending again cannot help
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// end stops the heartbeat and waits for run to return; the second and
// later calls do nothing.
func (h *heartbeat) end() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	if h.stop != nil {
		close(h.stop)
	}
	h.mu.Unlock()
	if h.timer.Stop() {
		return // run never started, and never will
	}
	// run has started (or is about to): it sees ended or stop and ends.
	h.running.Wait()
}

// upstreamAmbiguous answers an exchange whose outcome is unknown: the claim
// is kept (no heartbeat) until its lease ends, and is never stored as a
// success nor released.
func (p *Proxy) upstreamAmbiguous(w http.ResponseWriter, r *http.Request, ex *exchange, ctx context.Context, err error) {
	// The transport's response header timeout is upstream.timeout too
	// (NewTransport), and may fire a moment before the call's own
	// deadline: either way the upstream did not answer in time
	// (TestGRPCUpstreamTimeout).
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err) {
		p.upstreamFailed(w, r, ex, problem.UpstreamTimeout.With(fmt.Sprintf(
			"the upstream did not answer within %s; it may have acted, so the key stays claimed until its lease ends", p.timeout)), err)
		return
	}
	p.upstreamFailed(w, r, ex, problem.UpstreamFailed.With(
		"the upstream exchange failed after the request was sent; it may have acted, so the key stays claimed until its lease ends"), err)
}

// handlerUnknown answers an exchange whose handler in process reported
// its outcome unknown (OutcomeUnknown) as upstreamAmbiguous answers the
// proxy's: the claim is kept until its lease ends; 504 when the engine's
// deadline passed or the cause is a timeout (a response header timeout
// of the backend the handler called), 502 otherwise.
func (p *Proxy) handlerUnknown(w http.ResponseWriter, r *http.Request, ex *exchange, ctx context.Context, cause error) {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		p.upstreamAmbiguous(w, r, ex, ctx, cause)
	case isTimeout(cause):
		p.upstreamFailed(w, r, ex, problem.UpstreamTimeout.With(
			"the handler's call timed out after the request may have reached what it calls; it may have acted, so the key stays claimed until its lease ends"), cause)
	default:
		p.upstreamFailed(w, r, ex, problem.UpstreamFailed.With(
			"the handler reported that its outcome is unknown; it may have acted, so the key stays claimed until its lease ends"), cause)
	}
}

// upstreamFailed answers a failed upstream exchange with pr; the access line
// carries the cause too (it used to say only outcome=upstream_error
// status=502).
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, ex *exchange, pr problem.Details, err error) {
	ex.cause = err
	p.log.Warn("upstream exchange failed", "route", ex.route.Name, "key_hash", keyHash(ex.id), "err", err)
	p.fail(w, ex, pr)
}

// unreachableProblem is the answer to a request the upstream could not
// be reached for (the proxy's own dial, or a handler in process saying
// Unreachable).
func unreachableProblem() problem.Details {
	return problem.UpstreamUnreachable.With("the upstream could not be reached; the request was not sent and the key was released")
}

// sentBody is the body of an outbound request: it lets go of the bytes
// once they are read to the end, so that a large request body is not
// kept alive by the outbound request (which the response refers to)
// while the response is read and stored (docs/performance.md, "1 MiB
// request and response bodies").
type sentBody struct{ b []byte }

// Read implements io.Reader.
func (s *sentBody) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		s.b = nil
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	if len(s.b) == 0 {
		s.b = nil
	}
	return n, nil
}

// Close implements io.Closer. It keeps the bytes: the transport may close
// the body from another goroutine than the one reading it, and the reader
// drops them at the end anyway.
func (s *sentBody) Close() error { return nil }

// smallSentBody is the largest request body sent upstream from a reader
// net/http knows to be in memory. Its transport flushes the request
// header in a write of its own before a body it does not know (so that a
// server may answer before the body is sent): a write(2) and a TCP
// segment more per forwarded request, for the upstream one more read, 6 %
// of idemgate's CPU per fresh key. A body already read whole needs no
// such wait, and one this small leaves with its header in one write. A
// larger one is sent through sentBody, which lets go of its bytes.
const smallSentBody = 64 << 10

// outboundBody returns the body of an outbound request for the bytes the
// fingerprint covered: an in-memory reader net/http writes with the
// header when small, sentBody otherwise. Neither is rewindable, and
// GetBody stays unset, so the transport never re-sends it; nor is an
// empty one http.NoBody, with which net/http would re-send a request
// carrying Idempotency-Key on a connection that failed.
func outboundBody(body []byte) io.ReadCloser {
	if len(body) <= smallSentBody {
		return io.NopCloser(bytes.NewReader(body))
	}
	return &sentBody{b: body}
}

// outbound builds the upstream request for an enforced exchange. Body is a
// non-rewindable reader with GetBody unset, so net/http's transport never
// re-sends it on its own (it would for a request carrying Idempotency-Key).
func (p *Proxy) outbound(ctx context.Context, r *http.Request, body []byte) *http.Request {
	if p.next != nil {
		// A gRPC handler in process (grpc-go's ServeHTTP) bounds its call
		// by grpc-timeout as a gRPC server does: it gets the detached
		// call's deadline too (TestGRPCTimeoutReplacedInProcess).
		out := inProcessRequest(ctx, r, body)
		p.grpcOutbound(out)
		return out
	}
	out := r.Clone(ctx)
	out.Body = outboundBody(body)
	out.GetBody = nil
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	out.RequestURI = ""
	out.Close = false
	removeHopByHop(out.Header)
	p.grpcOutbound(out)
	// The body is already here; asking the upstream for 100 Continue would
	// only add a round trip.
	out.Header.Del("Expect")
	// The client's Forwarded and X-Forwarded-* fields are replaced (or,
	// from a trusted peer, appended to) by rewrite's forwardingHeaders.
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // as ReverseProxy: do not add Go's default
	}
	p.rewrite(&httputil.ProxyRequest{In: r, Out: out})
	return out
}

// copyResponse streams resp to the client, after the already-read prefix.
// The caller has set ex's outcome and status. A copy that fails midway (the
// upstream's body broke, or the client left) can no longer be answered:
// returning would let net/http end a chunked response with a clean final
// chunk, and the client would take a short body for a complete one. So, as
// httputil.ReverseProxy does (golang/go#23643), the response is aborted
// with http.ErrAbortHandler, which cuts the connection, and ServeHTTP's
// deferred completion records the request as it unwinds
// (TestBrokenUpstreamStreamIsCut).
func (p *Proxy) copyResponse(w http.ResponseWriter, r *http.Request, ex *exchange, resp *http.Response, prefix []byte) {
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = append([]string(nil), values...)
	}
	removeHopByHop(h)
	if len(resp.Trailer) > 0 {
		// Announced by the upstream: keep them, as httputil.ReverseProxy
		// does (TestTrailersKeptAndReplayed).
		announceTrailers(h, resp.Trailer)
		h.Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)
	var err error
	if len(prefix) > 0 {
		_, err = w.Write(prefix)
	}
	if err == nil {
		_, err = io.Copy(w, resp.Body)
	}
	if err == nil && len(resp.Trailer) > 0 {
		sendTrailers(h, StoredTrailer(resp.Trailer))
	}
	if err != nil {
		p.log.Warn("response stream broken; connection cut", "route", ex.route.Name, "key_hash", keyHash(ex.id),
			"status", resp.StatusCode, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// forwardUnprotected sends a request whose claim failed on a fail_open route:
// it may run twice, which the route accepted.
func (p *Proxy) forwardUnprotected(w http.ResponseWriter, r *http.Request, ex *exchange) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.timeout)
	defer cancel()
	var call *handlerCall
	if p.next != nil {
		// No claim: the handler's reports count for nothing, and an
		// engine nested inside enforces the request by its own route
		// (covers), since no claim of this one covers it.
		call = &handlerCall{}
		ctx = withCall(ctx, call)
	}
	out := p.outbound(ctx, r, ex.body)
	call.of(out, ex.route)
	resp, err := p.transport.RoundTrip(out)
	if hp, ok := err.(*handlerPanic); ok {
		panic(hp.value) // in process: nothing was claimed, the panic goes on
	}
	if err != nil {
		p.upstreamFailed(w, r, ex, problem.UpstreamFailed.With("the upstream exchange failed"), err)
		return
	}
	defer resp.Body.Close()
	ex.outcome, ex.status = metrics.OutcomeFailOpen, resp.StatusCode
	p.copyResponse(w, r, ex, resp, nil)
}
