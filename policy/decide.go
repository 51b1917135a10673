package policy

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/internal/httpsyntax"
)

// Strictness orders how strongly a route treats a request method:
// NotEnforced < EnforcedOptional < EnforcedRequired. The route decision
// never lets a request through under a route weaker than the route that
// governs one of its variants (see Policy.Decide).
type Strictness int

// Strictness levels, weakest first.
const (
	// NotEnforced: mode passthrough, or the method is not in methods.
	NotEnforced Strictness = iota
	// EnforcedOptional: enforced when the request carries a key.
	EnforcedOptional
	// EnforcedRequired: enforced, and a request without a key is refused.
	EnforcedRequired
)

// String returns "not enforced", "enforced, key optional" or "enforced, key
// required", as the refusal details and docs/routing.md say it.
func (s Strictness) String() string {
	switch s {
	case EnforcedOptional:
		return "enforced, key optional"
	case EnforcedRequired:
		return "enforced, key required"
	}
	return "not enforced"
}

// Strictness returns how r treats requests with this (case-sensitive)
// method: NotEnforced, EnforcedOptional or EnforcedRequired.
func (r *Route) Strictness(method string) Strictness {
	switch {
	case !r.Enforces(method):
		return NotEnforced
	case r.Required:
		return EnforcedRequired
	}
	return EnforcedOptional
}

// scope is the key scope of a route: two routes with the same scope share
// idempotency records (store.Identity.Scope), so a request may move between
// them without a key being run twice.
func (r *Route) scope() string { return r.Scope }

func sameScope(a, b *Route) bool { return a == b || a.scope() == b.scope() }

// Decision is the outcome of Policy.Decide: which route governs a request,
// or why it must be refused.
type Decision struct {
	// Route governs the request: the proxy applies its mode, methods, key,
	// owner, limits and records. Never nil. It is Matched, or a stricter
	// route that governs a path variant of the request (Decide).
	Route *Route
	// Matched is the route the request matches as sent (Policy.Match).
	Matched *Route
	// Refuse, when not "", says why the request is refused as
	// ambiguous-request: one of its variants is governed by a stricter
	// route, or by another route as strict, that this form would escape.
	// Route is still set (for metrics and logs).
	Refuse string
	// NeedBody reports that the decision is provisional: the request has a
	// body whose _method member could change it: a form
	// (application/x-www-form-urlencoded, multipart/form-data, or no
	// Content-Type at all, which Rack reads as a form) or JSON. The caller
	// reads the body, at most Route.MaxRequestBytes, and calls DecideBody
	// with it.
	NeedBody bool
}

// Decide says which route governs r, or why r must be refused. It matches r
// as Match does, then considers the forms in which the upstream, or a
// normalizing hop in front of it, may execute r:
//
//   - path variants: %XX decoded (%2F included), and decoded again up to
//     maxDecodes times in all ("%252F" as a hop that decodes twice reads
//     it), "\" read as "/", ";" parameters stripped from every segment
//     (each alone and combined), trailing "." and " " stripped from every
//     segment (IIS), a ".ext" format extension of the last segment removed
//     (Rails), dot segments and repeated slashes resolved, in lower case,
//     with the trailing slash added or removed;
//   - method variants: the method in upper case, and every method override
//     (MethodOverrideHeaders, with "_" for "-" in their names; a _method
//     query parameter or form field, its name also as PHP registers it; a
//     top-level string member _method of a JSON body).
//
// With Strictness as the order (passthrough or method not enforced <
// enforced with an optional key < enforced with a required key):
//
//   - a path variant governed by a stricter route than the one r matched
//     makes that route govern r (POST /v1/orders/ is enforced by route
//     "POST /v1/orders"), unless two stricter routes of different key
//     scopes tie, which is refused;
//   - r is refused when a path variant is governed by another route, of
//     another key scope, exactly as strict as the route r matched and
//     preferred to it: the route of the most normalized form (decoded,
//     lower case, without trailing slash first) wins, and a declared route
//     wins over the defaults route;
//   - r is refused when a method variant is governed by a stricter route,
//     or by an equally strict route of another scope, than the decision's;
//     and when r is enforced, carries the route's key field and a method
//     override names another method (its record would be kept under the
//     method sent while the upstream performs another).
//
// A body is only needed on methods other than GET and HEAD, when it is not
// empty, is a form (a form content type, or none) or JSON, and some
// override could change the decision (for a form, also whenever the
// request is enforced and carries a key); then NeedBody is set and
// DecideBody finishes the decision.
//
// A request already in canonical form (upper-case method, no override, no
// form body to check, path clean, without ";", "%" or backslash and in the
// default encoding) costs no match beyond Match's when New found no route
// that could govern its case or trailing-slash variants more strictly (or
// as strictly, under another scope) than its own, and, for a JSON body, no
// route that a _method member could reach.
func (p *Policy) Decide(r *http.Request) Decision {
	return p.decide(r, nil, false)
}

// DecideBody is Decide with the request body at hand, for a Decision whose
// NeedBody was set: it also considers a _method field of a form body, and
// never sets NeedBody. body is the request body as read (the caller passes
// the same bytes upstream); a body that is not a valid form adds no
// variant.
func (p *Policy) DecideBody(r *http.Request, body []byte) Decision {
	return p.decide(r, body, true)
}

func (p *Policy) decide(r *http.Request, body []byte, haveBody bool) Decision {
	if r == nil || r.URL == nil {
		return Decision{Route: p.defaults, Matched: p.defaults}
	}
	method := r.Method
	matched, canonical := p.match(r, method)
	d := Decision{Route: matched, Matched: matched}

	overrides := headerOverrides(r.Header)
	queryOverride := r.URL.RawQuery != "" && mayHaveMethodParam(r.URL.RawQuery)
	kind := noBody
	if !haveBody && r.Body != nil && r.Body != http.NoBody {
		kind = bodyKindOf(r)
	}
	fast := canonical && !p.exhaustive && isUpperASCII(method)
	vary := fast && p.mayVary(matched, method, r.Host, r.URL.Path)
	if fast && !overrides && !queryOverride && kind != formBody && !haveBody && !vary &&
		(kind != jsonBody || !p.mayOverride(matched, method, r.Host, r.URL.Path)) {
		return d
	}
	var vs variantSet
	// plain: the path and method are canonical, so the rival sets New
	// built (mayVary, mayOverride) tell exactly which variants could change
	// the decision, and decideVariants matches only those.
	plain := fast && method != http.MethodConnect
	d = p.decideVariants(r, body, haveBody, d, kind, variantOpts{
		headerOverride: overrides, queryOverride: queryOverride, plain: plain, still: plain && !vary,
	}, &vs)
	if vs.truncated && d.Refuse == "" {
		// The decision saw only the first maxPathForms forms: any other
		// could belong to a stricter route.
		d.Refuse = "the path combines more forms that the upstream may normalize (encodings, backslashes, parameters, extensions, trailing dots) than are checked; send it in canonical form"
		d.NeedBody = false
	}
	return d
}

// variantOpts is what decide already knows of a request when it hands it to
// decideVariants: which overrides it carries, and how far the rival sets
// New built may stand in for matching its variants.
type variantOpts struct {
	// headerOverride: r carries a method-override field (headerOverrides).
	headerOverride bool
	// queryOverride: r's query may carry a _method parameter
	// (mayHaveMethodParam).
	queryOverride bool
	// plain reports a canonical path and upper-case method (Decide's fast
	// path): then a variant no rival of New's reaches (mayVary,
	// overrideReaches) cannot change the decision, so it is not matched.
	// With 1,000 routes in many scopes, matching every method's variants
	// cost a keyed JSON request 5 to 8 µs of ServeMux lookups
	// (docs/performance.md, "1,000 routes").
	plain bool
	// still: mayVary found no rival for the path variants, so they are not
	// surveyed.
	still bool
}

// decideVariants is Decide past its fast path: d is the decision for the
// request as matched, o what decide found out about the request.
func (p *Policy) decideVariants(r *http.Request, body []byte, haveBody bool, d Decision, kind bodyKind, o variantOpts, vs *variantSet) Decision {
	vs.r = r
	plain := o.plain
	method := r.Method
	matched := d.Matched
	upper := strings.ToUpper(method)

	// Path variants, same method: lift to a stricter route, or refuse.
	s := matched.Strictness(method)
	sv := surveyed{winner: matched}
	if slices.Contains(p.enforced, method) && !o.still {
		sv = p.survey(r, method, vs.get(), matched)
	}
	switch {
	case sv.max > s && sv.scopes > 1:
		d.Refuse = "the path has variants (" + sv.winnerPath + " and others) governed by different routes that enforce " + method + " more strictly than route " + matched.Name + "; send the path as the intended route declares it"
		return d
	case sv.max > s:
		d.Route = sv.winner
	case sv.max > NotEnforced && !sameScope(sv.winner, matched):
		d.Refuse = "the path " + sv.winnerPath + ", which the upstream may treat as this request, belongs to route " + sv.winner.Name + " (" + sv.max.String() + "), not to route " + matched.Name + "; send it as " + sv.winnerPath
		return d
	}
	route := d.Route
	sd := route.Strictness(method)
	// The override rivals are New's for a request that its matched route
	// governs; a lifted decision takes the full check.
	plain = plain && route == matched

	// Method variants: refuse any that is stricter, or as strict elsewhere.
	if upper != method {
		if why := p.methodVariant(r, upper, vs, route, sd); why != "" {
			d.Refuse = "the method " + method + " must be sent in upper case (" + upper + "): " + why
			return d
		}
	}
	keyed := sd > NotEnforced && len(r.Header[route.Header]) > 0
	check := func(source, m string) string {
		if m == "" || m == upper {
			return ""
		}
		if keyed {
			return source + " names the method " + m + " on an enforced " + method + " request; its record would be kept under " + method + " while the upstream performs " + m + ", so it is refused"
		}
		if plain && !p.overrideReaches(route, sd, m, r.Host, r.URL.Path) {
			return ""
		}
		if why := p.methodVariant(r, m, vs, route, sd); why != "" {
			return source + " names the method " + m + ": " + why
		}
		return ""
	}
	if o.headerOverride {
		for _, name := range overrideFields(r.Header) {
			for _, v := range r.Header[name] {
				for _, m := range splitMethods(v) {
					if why := check("the "+name+" field", m); why != "" {
						d.Refuse = why
						return d
					}
				}
			}
		}
	}
	if o.queryOverride {
		for _, m := range methodParams(r.URL.RawQuery) {
			if why := check("the _method query parameter", m); why != "" {
				d.Refuse = why
				return d
			}
		}
	}
	if haveBody {
		source, methods := bodyMethods(r, body)
		for _, m := range methods {
			if why := check(source, m); why != "" {
				d.Refuse = why
				return d
			}
		}
		return d
	}
	if kind != noBody {
		// Could any _method value change the decision? Only then is the
		// body worth reading. A keyed form always is: Rails and Laravel
		// read form fields on every request, and a keyed request that
		// names another method is refused whatever the routes. A JSON body
		// is only read when some route its _method could reach would
		// change the decision, so canonical JSON requests stay free.
		if keyed && kind == formBody {
			d.NeedBody = true
			return d
		}
		for _, m := range p.enforced {
			if m == upper || plain && !p.overrideReaches(route, sd, m, r.Host, r.URL.Path) {
				continue
			}
			if plain {
				switch p.matchers[m].fate(r.Host, r.URL.Path) {
				case allDefaults:
					// Every variant of the request sent as m falls to
					// the defaults route: methodVariant's answer without
					// a match.
					if p.defaultsVariant(m, route, sd) {
						d.NeedBody = true
						return d
					}
					continue
				case allUnenforced:
					continue
				}
			}
			if p.methodVariant(r, m, vs, route, sd) != "" {
				d.NeedBody = true
				return d
			}
		}
	}
	return d
}

// methodVariant returns why r sent with method m instead of its own would
// escape the decision's route (governed by a stricter route, or by an
// equally strict route of another scope), or "".
func (p *Policy) methodVariant(r *http.Request, m string, vs *variantSet, route *Route, sd Strictness) string {
	if !slices.Contains(p.enforced, m) {
		return ""
	}
	raw, _ := p.match(r, m)
	sv := p.survey(r, m, vs.get(), raw)
	switch {
	case sv.max > sd:
		return "route " + sv.winner.Name + " governs " + m + " " + sv.winnerPath + " (" + sv.max.String() + "), more strictly than route " + route.Name + " governs this request"
	case sv.max > NotEnforced && !sameScope(sv.winner, route):
		return "route " + sv.winner.Name + " governs " + m + " " + sv.winnerPath + " (" + sv.max.String() + "), not route " + route.Name
	}
	return ""
}

// defaultsVariant reports whether methodVariant(m) is not "" for a
// request whose every path form, sent as m, the defaults route governs.
func (p *Policy) defaultsVariant(m string, route *Route, sd Strictness) bool {
	s := p.defaults.Strictness(m)
	return s > sd || s > NotEnforced && !sameScope(p.defaults, route)
}

// surveyed is the strictest treatment of one method over a request's path
// forms.
type surveyed struct {
	max        Strictness
	winner     *Route // preferred route at max: first declared one in form order, else defaults
	winnerPath string // the form that winner governs
	scopes     int    // distinct key scopes of declared routes at max (counted up to 2)
}

// survey matches method with every path form (raw is the route of the form
// as sent, so it is not matched again) and returns the strictest.
func (p *Policy) survey(r *http.Request, method string, forms []pathForm, raw *Route) surveyed {
	var sv surveyed
	consider := func(rt *Route, path string) {
		s := rt.Strictness(method)
		switch {
		case s > sv.max || sv.winner == nil:
			sv = surveyed{max: s, winner: rt, winnerPath: path}
			if rt != p.defaults {
				sv.scopes = 1
			}
		case s < sv.max:
		case rt == p.defaults:
		case sv.winner == p.defaults:
			sv.winner, sv.winnerPath, sv.scopes = rt, path, 1
		case !sameScope(rt, sv.winner):
			sv.scopes = 2
		}
	}
	rawSeen := false
	for _, f := range forms {
		if f.raw {
			consider(raw, f.path)
			rawSeen = true
			continue
		}
		consider(p.matchPath(r, method, f.path, f.escaped), f.path)
	}
	if !rawSeen {
		consider(raw, r.URL.Path)
	}
	return sv
}

// matchPath returns the route for r with method and another path (escaped:
// path keeps the request's escapes).
func (p *Policy) matchPath(r *http.Request, method, path string, escaped bool) *Route {
	u := &url.URL{Path: path}
	if escaped {
		unesc, err := url.PathUnescape(path)
		if err != nil {
			return p.defaults
		}
		u = &url.URL{Path: unesc, RawPath: path}
	}
	return p.lookup(&http.Request{Method: method, Host: httpsyntax.Host(r.Host), URL: u})
}

func (p *Policy) lookup(req *http.Request) *Route {
	if h, _ := p.mux.Handler(req); h != nil {
		if rh, ok := h.(routeHandler); ok {
			return rh.route
		}
	}
	return p.defaults
}
