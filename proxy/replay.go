package proxy

import (
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// replay writes a completed record's response exactly as stored, plus the
// replay marker; the upstream is not touched. resp is retained (replayOf
// answers the other cases).
func (p *Proxy) replay(w http.ResponseWriter, r *http.Request, ex *exchange, resp *store.Response) {
	writeStored(w, r, resp, true)
	ex.outcome, ex.status = metrics.OutcomeReplayed, resp.Status
	p.done(r, ex)
}

// writeStored writes a stored response: its headers as stored, the replay
// marker when replayed, Content-Length from the body, and the body unless
// the request is HEAD. The original answer and every replay go through it,
// so they differ only by the marker.
func writeStored(w http.ResponseWriter, r *http.Request, resp *store.Response, replayed bool) {
	h := w.Header()
	for name, values := range resp.Header {
		// resp.Header is this request's own copy (filtered from the
		// upstream's, or handed out by the store), so no second copy.
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
