package proxy

import (
	"net/http"
	"net/textproto"
	"slices"
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

// removeFields deletes the hop-by-hop fields, the fields any Connection field
// names, and extra (canonical names) from h, whatever the letter case of the
// map keys: field names are case-insensitive (RFC 9110 section 5.1) and a
// header map from a custom Transport need not be canonical. h.Del alone
// missed a "content-length" or "connection" key, which a replay then wrote
// next to its own Content-Length.
func removeFields(h http.Header, extra ...string) {
	// No set built per call: this runs on every forwarded request and
	// response (four times for a fresh key), and the lists are short.
	var named []string // the fields a Connection field names, canonical
	for key, values := range h {
		if !strings.EqualFold(key, "Connection") {
			continue
		}
		for _, v := range values {
			for name := range strings.SplitSeq(v, ",") {
				if name = textproto.TrimString(name); name != "" {
					named = append(named, textproto.CanonicalMIMEHeaderKey(name))
				}
			}
		}
	}
	for key := range h {
		k := textproto.CanonicalMIMEHeaderKey(key)
		if slices.Contains(hopHeaders, k) || slices.Contains(extra, k) || slices.Contains(named, k) {
			delete(h, key)
		}
	}
}

// StoredHeader returns the response fields of h that a replay repeats: a deep
// copy without hop-by-hop fields, without Content-Length (a replay sets it
// from the stored body) and without Idempotent-Replayed (only idemgate says
// whether a response is a replay), in any letter case. Values keep their
// order; Set-Cookie lines stay separate.
func StoredHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for name, values := range h {
		out[name] = append([]string(nil), values...)
	}
	removeFields(out, "Content-Length", ReplayedHeader)
	return out
}
