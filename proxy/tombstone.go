package proxy

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
)

// Tombstones (docs/protocol.md, "Resource index and tombstones"): a route with
// `resource_from: location` indexes each stored response by the path of its
// Location field (index), and a request whose method is in such a route's
// tombstone_methods, answered 2xx by the upstream, turns the same owner's
// records indexed at its path into tombstones before its answer reaches the
// client (tombstone), so a client that saw the DELETE succeed and then retries
// the create gets 410 resource-deleted, never the old 201. The tombstoning is
// idempotent and retried; a replay of an enforced DELETE repeats it, which
// repairs a crash between the upstream's 2xx and the tombstoning.

// tombstoneAttempts bounds the tries of one tombstoning before the client
// gets its answer anyway (the DELETE did happen upstream).
const tombstoneAttempts = 3

// resourcePath returns the path of a Location field value resolved against
// the request URL, cleaned as route patterns are (policy.CleanPath), and
// false when there is no usable Location.
func resourcePath(base *url.URL, location string) (string, bool) {
	if location == "" {
		return "", false
	}
	loc, err := url.Parse(location)
	if err != nil {
		return "", false
	}
	u := base.ResolveReference(loc)
	if u.Path == "" {
		return "", false
	}
	return policy.CleanPath(u.Path), true
}

// tombstone turns the records indexed at ex's targets into tombstones
// when status is 2xx. Each target is tried up to tombstoneAttempts times;
// a failure is logged and the client still gets the upstream's answer.
func (p *Proxy) tombstone(ctx context.Context, ex *exchange, status int) {
	if len(ex.plan.Tombstones) == 0 || status < 200 || status > 299 {
		return
	}
	for _, res := range ex.plan.Tombstones {
		var err error
		for attempt := range tombstoneAttempts {
			if attempt > 0 {
				time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
			}
			sctx := p.storeCtx(ctx)
			var n int
			n, err = p.store.Tombstone(sctx, res)
			sctx.cancel()
			if err == nil {
				if n > 0 {
					p.log.Info("records tombstoned", "scope", res.Scope, "path", res.Path, "records", n)
				}
				break
			}
		}
		if err != nil {
			p.noteStoreError()
			p.log.Error("tombstoning failed: retries of the creates of this resource may still replay", "scope", res.Scope, "path", res.Path, "err", err)
		}
	}
}

// index adds ex's completed record to the index of the resource its
// response names, on routes with resource_from. Called after a successful
// Complete and on every replay (idempotent), so a response recorded in
// the background is indexed by its next retry.
func (p *Proxy) index(r *http.Request, ex *exchange, resp *store.Response) {
	if ex.route.ResourceFrom != policy.ResourceFromLocation || resp == nil || resp.Omitted {
		return
	}
	path, ok := resourcePath(r.URL, resp.Header.Get("Location"))
	if !ok {
		return
	}
	ctx := p.storeCtx(r.Context())
	defer ctx.cancel()
	if err := p.store.Index(ctx, path, ex.id); err != nil {
		p.noteStoreError()
		p.log.Warn("could not index the record by its Location; a DELETE of it will not tombstone it",
			"route", ex.route.Name, "key_hash", keyHash(ex.id), "err", err)
	}
}

// modifyPassthrough is the passthrough ReverseProxy's ModifyResponse: a
// request that is not enforced still tombstones on a 2xx answer, before
// the answer is written.
func (p *Proxy) modifyPassthrough(resp *http.Response) error {
	if ex := exchangeOf(resp.Request.Context()); ex != nil {
		p.tombstone(resp.Request.Context(), ex, resp.StatusCode)
	}
	return nil
}

// tombstoneWriter is the client's writer of a request that passes through
// to the handler in process (the middleware, the Caddy module) and whose
// 2xx answer tombstones (exchange.plan.Tombstones). No ModifyResponse sees
// that answer, so the writer tombstones, as modifyPassthrough does for the
// proxy's upstream, when the handler writes its final status and before
// the status reaches the client: a client that saw the DELETE succeed and
// retries the create gets 410 resource-deleted, never the deleted
// resource's 201 (TestTombstonesInProcess, TestCaddyTombstones). A handler
// that returns having written nothing answered net/http's implicit 200
// and tombstones as one that wrote it (TestTombstoneOnAnImplicit200InProcess),
// unless it returned an error its host answers (HostAnswers: a Caddy
// handler's).
type tombstoneWriter struct {
	http.ResponseWriter
	p       *Proxy
	ex      *exchange
	ctx     context.Context
	decided bool
}

// decide tombstones on the first final status written, once.
func (w *tombstoneWriter) decide(code int) {
	if w.decided || code < 200 {
		return
	}
	w.decided = true
	w.p.tombstone(w.ctx, w.ex, code)
}

// WriteHeader tombstones on a final 2xx status, then writes it.
func (w *tombstoneWriter) WriteHeader(code int) {
	w.decide(code)
	w.ResponseWriter.WriteHeader(code)
}

// Write is net/http's implicit 200 when nothing was written before.
func (w *tombstoneWriter) Write(b []byte) (int, error) {
	w.decide(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush sends net/http's implicit 200 when nothing was written before.
func (w *tombstoneWriter) Flush() {
	w.decide(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying writer (http.ResponseController).
func (w *tombstoneWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
