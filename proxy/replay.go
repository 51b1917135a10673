package proxy

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// replay writes a completed record's response as stored, plus the replay
// marker; the upstream is not touched. resp is retained (replayOf answers
// the other cases).
func (p *Proxy) replay(w http.ResponseWriter, r *http.Request, ex *exchange, resp *store.Response) {
	p.writeStored(w, r, ex, resp, true)
	ex.outcome, ex.status = metrics.OutcomeReplayed, resp.Status
	p.done(r, ex)
}

// writeStored writes a stored response: its headers as stored, the replay
// marker when replayed, Content-Length from the body, and the body unless
// the request is HEAD. The original answer and every replay go through it,
// so they differ only by the marker, and by the content coding when the
// request does not accept the stored one (fitCoding; issue 13).
func (p *Proxy) writeStored(w http.ResponseWriter, r *http.Request, ex *exchange, resp *store.Response, replayed bool) {
	fitted, err := fitCoding(r, resp, ex.route.MaxResponseBytes)
	if err != nil {
		// Written as stored: the client may still know the coding, and
		// no other body would be the operation's answer.
		p.log.Warn("stored response not decoded for a client that does not accept its content coding",
			"route", ex.route.Name, "key_hash", LogDigest(ex.id.Key), "content_encoding", resp.Header.Get("Content-Encoding"),
			"unknown_coding", errors.Is(err, errUnknownCoding), "too_large", errors.Is(err, errDecodedTooLarge), "err", err)
	}
	resp = fitted
	h := w.Header()
	for name, values := range resp.Header {
		// resp.Header is this request's own copy (filtered from the
		// upstream's, handed out by the store, or made by fitCoding), so
		// no second copy.
		h[name] = values
	}
	if replayed {
		h.Set(ReplayedHeader, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}
