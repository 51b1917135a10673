package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders are the hop-by-hop fields of RFC 9110 section 7.6.1 (plus the
// legacy ones net/http/httputil removes); they describe one connection and
// are never forwarded, stored or replayed.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// removeHopByHop deletes hop-by-hop fields from h, including every field
// that the Connection field names.
func removeHopByHop(h http.Header) { removeFields(h) }

// upstreamView returns r as the upstream will get it, with ex in its
// context (exchangeOf), and makes it ex's request: without the hop-by-hop
// fields and the fields a Connection field names, so that a field the
// upstream never gets decides neither the route, nor an override, nor the
// owner, nor the fingerprint ("Connection: Content-Type" would otherwise
// make two requests the upstream tells apart share one fingerprint;
// TestTombstoneOwnerIsWhatTheUpstreamGets,
// TestAttackOwnerFieldNamedByConnectionIsNoOwner). A shallow copy of r
// whose header is r's own when r carries no such field, as almost no
// request over HTTP/2 or from a Go client does; else a copy without them,
// and r's header stays as it came for a request passed through
// (exchange.passthroughRequest).
func upstreamView(r *http.Request, ex *exchange) *http.Request {
	ex.ctx = exchangeCtx{Context: r.Context(), ex: ex}
	v := r.WithContext(&ex.ctx)
	if hasHopByHop(r.Header) {
		v.Header = r.Header.Clone()
		removeHopByHop(v.Header)
		ex.cameHeader = r.Header
	}
	ex.r = v
	return v
}

// hasHopByHop reports whether h holds a hop-by-hop field, in any letter
// case (a Connection field among them, whatever it names).
func hasHopByHop(h http.Header) bool {
	for key := range h {
		for _, hop := range hopHeaders {
			if len(hop) == len(key) && strings.EqualFold(hop, key) {
				return true
			}
		}
	}
	return false
}

// removeFields deletes the hop-by-hop fields, the fields any Connection field
// names, and extra (canonical names) from h, whatever the letter case of the
// map keys: field names are case-insensitive (RFC 9110 section 5.1) and a
// header map from a custom Transport need not be canonical. h.Del alone
// missed a "content-length" or "connection" key, which a replay then wrote
// next to its own Content-Length.
func removeFields(h http.Header, extra ...string) {
	// No set built per call and no key canonicalized: this runs on every
	// forwarded request and response (four times for a fresh key), the
	// lists are short, and a comparison that first checks the length
	// rejects almost every key at once. One pass over h unless a
	// Connection field names other fields (almost never), which a second
	// pass removes.
	var named []string // the fields a Connection field names, in any case
	for key, values := range h {
		if !foldIn(hopHeaders, key) && !foldIn(extra, key) {
			continue
		}
		if foldEqual(key, "Connection") {
			for _, v := range values {
				for name := range strings.SplitSeq(v, ",") {
					if name = textproto.TrimString(name); name != "" {
						named = append(named, name)
					}
				}
			}
		}
		delete(h, key)
	}
	if len(named) == 0 {
		return
	}
	for key := range h {
		if foldIn(named, key) {
			delete(h, key)
		}
	}
}

// foldIn reports whether key is one of names, in any letter case.
func foldIn(names []string, key string) bool {
	for _, name := range names {
		if foldEqual(name, key) {
			return true
		}
	}
	return false
}

// foldEqual reports whether field names a and b are equal in ASCII letter
// case, byte for byte otherwise. A field name is a token (RFC 9110 section
// 5.1), ASCII only: strings.EqualFold would also match two different
// invalid UTF-8 bytes (both read as U+FFFD), so a Connection field naming
// one would remove a field of another name. Lengths first: most keys
// differ from the names they are checked against in length.
func foldEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// StoredHeader returns the response fields of h that a replay repeats: a deep
// copy without hop-by-hop fields, without Content-Length (a replay sets it
// from the stored body) and without Idempotent-Replayed (only idemgate says
// whether a response is a replay), in any letter case. Values keep their
// order; Set-Cookie lines stay separate.
func StoredHeader(h http.Header) http.Header {
	// Clone puts every value in one backing array, each name's slice
	// capped at its own values: one allocation for them instead of one per
	// name, and an append to one name's values never reaches another's.
	out := h.Clone()
	if out == nil {
		out = make(http.Header)
	}
	removeFields(out, "Content-Length", ReplayedHeader)
	return out
}

// ownStoredHeader is StoredHeader for a header the caller owns and does
// not read again (a response's, once its record is built): the fields a
// replay does not repeat are removed from h itself, without a copy. Its
// values stay as they came, each name's slice capped at its own values
// (net/http's reader and http.Header.Clone cut them from one array so).
func ownStoredHeader(h http.Header) http.Header {
	if h == nil {
		return make(http.Header)
	}
	removeFields(h, "Content-Length", ReplayedHeader)
	return h
}
