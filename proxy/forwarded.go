package proxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strings"
)

// realIPHeader is X-Real-IP in its canonical form, so that setting it
// costs no canonicalisation (net/http would allocate "X-Real-Ip" from
// "X-Real-IP" on every request).
const realIPHeader = "X-Real-Ip"

// forwardingHeaders sets what the upstream learns about the client hop, on
// both the passthrough and the enforced path (docs/proxy.md, "What the upstream
// receives"). From a peer in trusted (the load balancers in front of
// idemgate) X-Forwarded-For and Forwarded are appended to, as nginx's
// proxy_add_x_forwarded_for and RFC 7239 section 4 do, and its
// X-Forwarded-Host and X-Forwarded-Proto are kept; from anyone else every
// one of them is replaced by what idemgate itself saw, so a client cannot
// pose as another address. X-Real-IP, which many backends behind nginx
// read as the client's address, is never passed on as received: it is
// the peer's address, or from a trusted peer the client address its
// X-Forwarded-For chain names (realIP). Only the upstream reads them:
// owners and fingerprints are computed from the request before this runs.
func forwardingHeaders(pr *httputil.ProxyRequest, trusted []netip.Prefix) {
	in, out := pr.In, pr.Out
	// ReverseProxy (passthrough) drops the client's X-Forwarded-* fields
	// from out before this runs, outbound (enforced) leaves them to these
	// deletions, and neither drops X-Real-IP; in still has them all.
	out.Header.Del("X-Forwarded-For")
	out.Header.Del("X-Forwarded-Host")
	out.Header.Del("X-Forwarded-Proto")
	out.Header.Del("Forwarded")
	out.Header.Del(realIPHeader)
	peer := peerAddr(in.RemoteAddr)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	hop := "for=" + forwardedNode(peer) + ";host=" + quoteForwarded(in.Host) + ";proto=" + proto
	if isTrusted(peer, trusted) {
		if prior := in.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			out.Header.Set("X-Forwarded-For", strings.Join(prior, ", ")+", "+peerString(peer, in.RemoteAddr))
		} else {
			out.Header.Set("X-Forwarded-For", peerString(peer, in.RemoteAddr))
		}
		if prior := in.Header.Values("Forwarded"); len(prior) > 0 {
			hop = strings.Join(prior, ", ") + ", " + hop
		}
		out.Header.Set("X-Forwarded-Host", firstNonEmpty(in.Header.Get("X-Forwarded-Host"), in.Host))
		out.Header.Set("X-Forwarded-Proto", firstNonEmpty(in.Header.Get("X-Forwarded-Proto"), proto))
		out.Header[realIPHeader] = []string{realIP(in.Header.Values("X-Forwarded-For"), peer, in.RemoteAddr, trusted)}
	} else {
		// One value slice for both fields: each holds exactly the peer,
		// and sharing it saves the request an allocation. Safe as nothing
		// writes into a field's values in place (Add appends past the
		// capacity of 1, so into a new array; Set replaces the slice).
		v := []string{peerString(peer, in.RemoteAddr)}
		out.Header["X-Forwarded-For"] = v
		out.Header[realIPHeader] = v
		out.Header.Set("X-Forwarded-Host", in.Host)
		out.Header.Set("X-Forwarded-Proto", proto)
	}
	out.Header.Set("Forwarded", hop)
}

// realIP is the client address behind a trusted peer, as nginx's realip
// module finds it with real_ip_recursive on: the X-Forwarded-For chain
// (every field line, comma-separated) followed by the peer, walked from the
// right past every address in trusted; the first address that is not
// trusted is the client. A chain of trusted addresses only gives its
// leftmost one, and an element that is not an address (a port-less
// "unknown", garbage) ends the walk at the last address read, which a
// trusted hop vouched for.
func realIP(chain []string, peer netip.Addr, remote string, trusted []netip.Prefix) string {
	client := peer
	for i := len(chain) - 1; i >= 0; i-- {
		elems := strings.Split(chain[i], ",")
		for j := len(elems) - 1; j >= 0; j-- {
			a, ok := chainAddr(elems[j])
			if !ok {
				return peerString(client, remote)
			}
			client = a
			if !isTrusted(a, trusted) {
				return a.String()
			}
		}
	}
	return peerString(client, remote)
}

// chainAddr parses one X-Forwarded-For element: an address, optionally
// with a port ("192.0.2.1:4711", "[2001:db8::1]:80") as some proxies write.
func chainAddr(elem string) (netip.Addr, bool) {
	elem = strings.TrimSpace(elem)
	if a, err := netip.ParseAddr(elem); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(elem); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(elem, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

func isTrusted(peer netip.Addr, trusted []netip.Prefix) bool {
	return peer.IsValid() && slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(peer) })
}

// peerAddr is the TCP peer's address, IPv4-mapped IPv6 unmapped so that
// 10.0.0.0/8 matches a dual-stack listener's peers.
func peerAddr(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func peerString(peer netip.Addr, remote string) string {
	if peer.IsValid() {
		return peer.String()
	}
	return remote
}

// forwardedNode is RFC 7239 section 6's node for peer: an IPv6 address is
// quoted and bracketed, an unknown one "unknown".
func forwardedNode(peer netip.Addr) string {
	switch {
	case !peer.IsValid():
		return "unknown"
	case peer.Is6():
		return `"[` + peer.String() + `]"`
	}
	return peer.String()
}

// quoteForwarded writes v as an RFC 7239 value: a token as is, anything
// else (a host with a port has ':') as a quoted-string.
func quoteForwarded(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			// A quoted-string (RFC 9110 section 5.6.4), escaping only
			// what must be; built by hand, as a strings.Replacer made per
			// call cost 7 allocations for every Host with a port.
			var b strings.Builder
			b.Grow(len(v) + 4)
			b.WriteByte('"')
			for j := 0; j < len(v); j++ {
				if v[j] == '\\' || v[j] == '"' {
					b.WriteByte('\\')
				}
				b.WriteByte(v[j])
			}
			b.WriteByte('"')
			return b.String()
		}
	}
	return v
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// hostFor returns the Host the upstream gets: the client's when passHost
// (Traefik's passHostHeader), else "" so that net/http sends the upstream
// URL's host.
func hostFor(in *http.Request, passHost bool) string {
	if passHost {
		return in.Host
	}
	return ""
}
