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
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// StoredHeader returns the response fields of h that a replay repeats: a deep
// copy without hop-by-hop fields and without Content-Length (a replay sets it
// from the stored body). Values keep their order; Set-Cookie lines stay
// separate.
func StoredHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for name, values := range h {
		out[name] = append([]string(nil), values...)
	}
	removeHopByHop(out)
	out.Del("Content-Length")
	return out
}
