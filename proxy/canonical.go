package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/idemgate/idemgate/policy"
)

// methodOverrideFields are the request fields by which common frameworks
// (Rails, Laravel, Express method-override, ASP.NET, Google APIs) let a
// request stand for another method.
var methodOverrideFields = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// ambiguity reports why r must be refused, or "" when it may proceed under
// route (pol.Match(r)). The route decision is made on the request as sent,
// but the upstream, or a normalizing hop in front of it (nginx decodes %XX
// and resolves dot segments; many frameworks ignore letter case, a trailing
// slash or the case of the method, or honour X-HTTP-Method-Override), may
// execute another form of it. A client could then send that form to land on
// a weaker policy (no enforcement, no required key, another key scope) while
// the upstream performs the protected operation. So r is refused when:
//
//   - a method-override field names another method and r or that method is
//     enforced (the fingerprint would not tell the two methods apart);
//   - the upper-case method, or the path with every %XX decoded, "\" read as
//     "/" and dot segments resolved, falls under a route that enforces it
//     where r's route does not, or under another enforcing route;
//   - r fell through to the defaults route but its path without the trailing
//     slash or in lower case falls under another route that enforces it.
//
// Requests already in canonical form (the common case) cost no extra match.
func ambiguity(pol *policy.Policy, r *http.Request, route *policy.Route) string {
	enforced := route.Enforces(r.Method)
	upper := strings.ToUpper(r.Method)
	for _, name := range methodOverrideFields {
		for _, v := range r.Header[name] {
			m := strings.ToUpper(strings.Trim(v, " \t"))
			if m == "" || m == upper {
				continue
			}
			if enforced || pol.Match(variant(r, m, nil)).Enforces(m) {
				return "the " + name + " field names another method than the request's; idemgate cannot tell which one the upstream performs, so it refuses to guess"
			}
		}
	}
	if upper != r.Method {
		if alt := pol.Match(variant(r, upper, nil)); alt.Enforces(upper) && (alt != route || !enforced) {
			return "the method " + r.Method + " must be sent in upper case (" + upper + "): route " + alt.Name + " governs it"
		}
	}
	if r.URL == nil || r.Method == http.MethodConnect {
		return ""
	}
	decoded := policy.CleanPath(strings.ReplaceAll(r.URL.Path, `\`, "/"))
	// RawPath is set exactly when the path was sent with escapes that
	// differ from the default encoding: %2F, %2E, %5C, an escaped letter.
	if r.URL.RawPath != "" || strings.Contains(r.URL.Path, `\`) {
		alt := pol.Match(variant(r, upper, &url.URL{Path: decoded}))
		if alt.Enforces(upper) && (alt != route || !enforced) {
			return "the path uses percent-encoded slashes or dots, or backslashes, that make it the path " + decoded + " of route " + alt.Name + " once decoded; send it decoded"
		}
	}
	if route != pol.Defaults() {
		return ""
	}
	trimmed := decoded
	if len(trimmed) > 1 {
		trimmed = strings.TrimSuffix(trimmed, "/")
	}
	for _, p := range []string{trimmed, strings.ToLower(decoded), strings.ToLower(trimmed)} {
		if p == decoded {
			continue
		}
		alt := pol.Match(variant(r, upper, &url.URL{Path: p}))
		if alt != route && alt.Enforces(upper) {
			return "the path differs from " + p + " of route " + alt.Name + " only by letter case or a trailing slash, which the upstream may ignore; send it as the route's path"
		}
	}
	return ""
}

// variant returns a shallow copy of r, for matching only, with method and,
// when u is not nil, the URL replaced.
func variant(r *http.Request, method string, u *url.URL) *http.Request {
	v := &http.Request{Method: method, Host: r.Host, Header: r.Header, URL: r.URL}
	if u != nil {
		v.URL = u
	}
	return v
}
