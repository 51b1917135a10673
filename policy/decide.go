package policy

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
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
// required", as the refusal details and the README say it.
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

// MethodOverrideHeaders are the request fields by which common frameworks
// (Express method-override, ASP.NET, Google APIs, Symfony) let a request
// stand for another method. With the _method query parameter and the
// _method form field (Rails, Laravel, Symfony) they are the method
// overrides Decide considers. A field whose name differs from one of them
// only in letter case and in "_" for "-" counts as that field: Rack, WSGI
// and CGI servers hand both spellings to the application as one
// HTTP_X_HTTP_METHOD_OVERRIDE.
var MethodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

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
	d = p.decideVariants(r, body, haveBody, d, kind, overrides, queryOverride, plain, plain && !vary, &vs)
	if vs.truncated && d.Refuse == "" {
		// The decision saw only the first maxPathForms forms: any other
		// could belong to a stricter route.
		d.Refuse = "the path combines more forms that the upstream may normalize (encodings, backslashes, parameters, extensions, trailing dots) than are checked; send it in canonical form"
		d.NeedBody = false
	}
	return d
}

// variantSet builds a request's path variants on first use (a GET with an
// escaped query needs none) and remembers whether they were cut short.
type variantSet struct {
	r         *http.Request
	forms     []pathForm
	built     bool
	truncated bool
}

// get returns the path variants, or none when they were cut short: the
// request is refused then (decide), so matching them would be wasted.
func (v *variantSet) get() []pathForm {
	if !v.built {
		v.forms, v.truncated = pathForms(v.r)
		v.built = true
		if v.truncated {
			v.forms = nil
		}
	}
	return v.forms
}

// decideVariants is Decide past its fast path: d is the decision for the
// request as matched.
//
// plain reports a canonical path and upper-case method (Decide's fast
// path): then a variant no rival of New's reaches (mayVary, overrideReaches)
// cannot change the decision, so it is not matched; still says that
// mayVary found no rival for the path variants. Why: with 1,000
// routes in many scopes, matching every method's variants cost a keyed JSON
// request 5 to 8 µs of ServeMux lookups.
func (p *Policy) decideVariants(r *http.Request, body []byte, haveBody bool, d Decision, kind bodyKind, overrides, queryOverride, plain, still bool, vs *variantSet) Decision {
	vs.r = r
	method := r.Method
	matched := d.Matched
	upper := strings.ToUpper(method)

	// Path variants, same method: lift to a stricter route, or refuse.
	s := matched.Strictness(method)
	sv := surveyed{winner: matched}
	if slices.Contains(p.enforced, method) && !still {
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
	if overrides {
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
	if queryOverride {
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

// mayVary reports whether a canonical request (isCanonicalPath) matched to
// route with method could have a case, trailing-slash, extension or
// trailing-dot variant governed by a rival: a route of another scope at least as strict (and enforcing),
// whose literal path prefix is compatible with path in any letter case. The
// rivals are found once, by New.
func (p *Policy) mayVary(route *Route, method, host, path string) bool {
	for i, rv := range p.rivals[route] {
		if rv.method == method {
			return p.rivals[route][i].reaches(host, path)
		}
	}
	// A method no route lists has no rival.
	return false
}

// reaches reports whether one of rv's routes could govern a case,
// trailing-slash, extension or trailing-dot variant of the canonical path
// (see tailForms). The extension variant is a prefix of the path, so a
// canonical "/v1/orders.json" costs no allocation; only a segment ending in
// "." or " " builds another string.
func (rv *rival) reaches(host, path string) bool {
	return tailsReach(path, func(x string) bool { return rv.covers(host, x) })
}

// tailsReach reports whether covers holds for a canonical path without
// its trailing slash, or for its extension or trailing-dot variants
// (tailForms); covers itself answers for every case and slash variant.
func tailsReach(path string, covers func(x string) bool) bool {
	x := strings.TrimSuffix(path, "/")
	if covers(x) {
		return true
	}
	if y := stripExtension(x); y != x && covers(y) {
		return true
	}
	if hasSegmentTail(x) {
		y := trimSegmentTails(x)
		return covers(y) || covers(stripExtension(y))
	}
	return false
}

// shapeSet holds, for one method, the shape of every declared pattern
// that can match it: its literal path prefix (literalPrefix) and how many
// non-empty segments a path needs past that prefix to match (each
// "{name}" wildcard or literal after the first wildcard; "{name...}" and
// "{$}" need none), apart by host as rival does. It answers whether a
// pattern could match a case, slash, extension or trailing-dot variant of
// a canonical path: "/v1/orders/{id}" cannot match "/v1/orders", so a
// request there, sent as PATCH, falls to the defaults route whatever
// other PATCH routes exist (docs/performance.md, "1,000 routes").
//
// Blanket patterns (host-less, lower-case subtrees without wildcards, such
// as "/v1/") are kept apart: below one, and near no other pattern, every
// variant is governed by a blanket, never by the defaults route.
type shapeSet struct {
	any      bool           // a pattern matches every path ("/" or "/{rest...}")
	need     map[string]int // lower-case literal prefix: fewest segments past it
	hosted   map[string]map[string]int
	blankets []blanket
}

// blanket is a blanket pattern: its root (literalPrefix) and whether its
// route enforces the set's method.
type blanket struct {
	root     string
	enforced bool
}

// add records pattern, whose route enforces the set's method or not.
func (s *shapeSet) add(pattern string, enforced bool) {
	prefix, need := literalPrefix(pattern), segmentsNeeded(patternPath(pattern))
	pat := patternPath(pattern)
	if patternHost(pattern) == "" && strings.HasSuffix(pat, "/") && !strings.Contains(pat, "{") && pat == strings.ToLower(pat) {
		s.blankets = append(s.blankets, blanket{root: prefix, enforced: enforced})
		return
	}
	m := s.need
	if h := patternHost(pattern); h != "" {
		if s.hosted == nil {
			s.hosted = map[string]map[string]int{}
		}
		if s.hosted[h] == nil {
			s.hosted[h] = map[string]int{}
		}
		m = s.hosted[h]
	} else if prefix == "" && need == 0 {
		s.any = true
	}
	if n, ok := m[prefix]; !ok || need < n {
		m[prefix] = need
	}
}

// segmentsNeeded counts the segments of a pattern path from its first
// wildcard on that a matching path must fill: every one but a trailing
// "{name...}", "{$}" or empty one.
func segmentsNeeded(path string) int {
	i := strings.IndexByte(path, '{')
	if i < 0 {
		return 0
	}
	n := 0
	for _, seg := range strings.Split(path[i:], "/") {
		if seg != "" && seg != "{$}" && !strings.HasSuffix(seg, "...}") {
			n++
		}
	}
	return n
}

// reaches reports whether a pattern of s could match a case, slash,
// extension or trailing-dot variant of the canonical path on a request
// whose Host field is host. It errs towards true: a non-ASCII path, and a
// host that merely contains a pattern's host, count as reached.
func (s *shapeSet) reaches(host, path string) bool {
	if s == nil {
		return false
	}
	if s.any {
		return true
	}
	return tailsReach(path, func(x string) bool {
		for _, b := range s.blankets {
			if len(x) >= len(b.root) && strings.EqualFold(x[:len(b.root)], b.root) && (len(x) == len(b.root) || x[len(b.root)] == '/') {
				return true
			}
		}
		return s.others(host, x)
	})
}

// others is reaches for one form x, blankets left out.
func (s *shapeSet) others(host, x string) bool {
	return func() bool {
		if shapeCovers(s.need, x) {
			return true
		}
		for h, m := range s.hosted {
			if containsFold(host, h) && shapeCovers(m, x) {
				return true
			}
		}
		return false
	}()
}

// Fates of a canonical request sent as another method (shapeSet.fate).
const (
	fateUnknown   = iota // variants may fall to several routes: match them
	allDefaults          // the defaults route governs every variant
	allUnenforced        // routes that do not enforce the method govern every variant
)

// fate tells, without a match, which routes govern every case, slash,
// extension and trailing-dot variant of a canonical path sent with the
// set's method: the defaults route when no pattern reaches any of them;
// only routes that do not enforce the method when every variant lies
// strictly below a blanket (case-sensitively, so the lower-case form does
// too), no other pattern reaches one (a more specific pattern, or one
// ServeMux would redirect to), and no blanket that could hold a variant
// enforces the method. ASCII paths only; else fateUnknown.
func (s *shapeSet) fate(host, path string) int {
	if !s.reaches(host, path) {
		return allDefaults
	}
	if len(s.blankets) == 0 {
		return fateUnknown
	}
	for i := 0; i < len(path); i++ {
		if path[i] >= 0x80 {
			return fateUnknown
		}
	}
	unknown := tailsReach(path, func(x string) bool {
		if s.others(host, x) {
			return true
		}
		below := false
		for _, b := range s.blankets {
			if len(x) < len(b.root) || !strings.EqualFold(x[:len(b.root)], b.root) || len(x) > len(b.root) && x[len(b.root)] != '/' {
				continue
			}
			if b.enforced {
				return true
			}
			if len(x) > len(b.root) && x[:len(b.root)] == b.root {
				below = true
			}
		}
		return !below
	})
	if unknown {
		return fateUnknown
	}
	return allUnenforced
}

// shapeCovers reports whether x (a clean path without trailing slash)
// starts, in any letter case, with a prefix of need at a segment boundary
// and has at least the segments that prefix needs past it. Every form
// tailsReach hands over has no more segments than the path.
func shapeCovers(need map[string]int, x string) bool {
	if len(need) == 0 {
		return false
	}
	if len(x) > maxIndexedPath {
		return true
	}
	var buf [maxIndexedPath]byte
	for i := 0; i < len(x); i++ {
		c := x[i]
		if c >= 0x80 {
			// strings.EqualFold folds some non-ASCII letters to ASCII.
			return true
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	lx := buf[:len(x)]
	for i := 0; i <= len(lx); i++ {
		if i < len(lx) && lx[i] != '/' {
			continue
		}
		n, ok := need[string(lx[:i])]
		if !ok {
			continue
		}
		if n == 0 || countSegments(lx[i:]) >= n {
			return true
		}
	}
	return false
}

// countSegments counts the non-empty segments of a path tail.
func countSegments(tail []byte) int {
	n := 0
	for i := 0; i < len(tail); i++ {
		if tail[i] != '/' && (i == 0 || tail[i-1] == '/') {
			n++
		}
	}
	return n
}

// covers reports whether one of rv's routes could govern x (a clean path
// without trailing slash) in any letter case, with or without the trailing
// slash, on a request whose Host field is host.
func (rv *rival) covers(host, x string) bool {
	if rv.defaults {
		// Below the root of a subtree route (a lower-case one, so the
		// lower-case forms stay below it too), every case and slash form
		// stays in that subtree or a more specific pattern: never the
		// defaults.
		if rv.subtree == "" || len(x) <= len(rv.subtree) || x[len(rv.subtree)] != '/' || x[:len(rv.subtree)] != rv.subtree {
			return true
		}
	}
	if rv.set.covers(x) {
		return true
	}
	for _, h := range rv.hosted {
		// ServeMux matches a host pattern only on that host, port
		// stripped; every variant keeps the request's host. Contained in
		// any letter case is a superset of that (a trailing dot, a port).
		if containsFold(host, h.host) && h.set.covers(x) {
			return true
		}
	}
	return false
}

// mayOverride reports whether a canonical request matched to route with
// method could have a method variant, named by a _method member of its
// body, that some route governs more strictly than route governs method, or
// as strictly under another scope (methodVariant). The routes are found
// once, by New.
func (p *Policy) mayOverride(route *Route, method, host, path string) bool {
	rvs := p.overrides[route][route.Strictness(method)]
	for i := range rvs {
		if rvs[i].method != method && rvs[i].reaches(host, path) {
			return true
		}
	}
	return false
}

// overrideReaches is mayOverride for one override method m: whether a
// canonical request decided for route at strictness sd could, sent as m,
// be governed by a route that methodVariant would name. When it reports
// false, methodVariant(m) returns "" for that request.
func (p *Policy) overrideReaches(route *Route, sd Strictness, m, host, path string) bool {
	rvs := p.overrides[route][sd]
	for i := range rvs {
		if rvs[i].method == m {
			return rvs[i].reaches(host, path)
		}
	}
	// No route governs m as methodVariant counts it.
	return false
}

// rival lists, for one route and one enforced method, the routes that could
// govern a variant of one of its requests more strictly, or as strictly
// under another scope: their literal path prefixes (set), and whether the
// defaults route is one of them. subtree is the route's own root when its
// pattern is a lower-case subtree without wildcards ("/v1/" is "/v1").
//
// Routes whose pattern names a host are kept apart, by host (hosted), so a
// request to another host does not count them: with 1,000 routes, a few
// host-bound creates would otherwise make every request below their
// paths take the full variant match (docs/performance.md, "1,000 routes").
type rival struct {
	method   string
	set      *prefixSet // nil: no declared route without a host
	hosted   []hostedSet
	defaults bool
	subtree  string
}

// hostedSet holds the literal path prefixes of the routes of one rival
// set whose pattern names host (lower case, as written).
type hostedSet struct {
	host string
	set  *prefixSet
}

// prefixSet holds the lower-cased literal path prefixes of some routes (up
// to the first wildcard, without trailing slash; "" matches every path).
// It is shared by every route of one scope and strictness (compileVariants),
// and indexed so that a lookup costs one map probe per segment of the
// path, whatever the number of routes (docs/performance.md, "1,000 routes").
type prefixSet struct {
	prefixes []string            // in route order, for non-ASCII or long paths
	index    map[string]struct{} // the same prefixes; nil: scan prefixes
	any      bool                // "" is one of them
}

func newPrefixSet(prefixes []string) *prefixSet {
	s := &prefixSet{prefixes: prefixes, index: make(map[string]struct{}, len(prefixes))}
	for _, l := range prefixes {
		s.index[l] = struct{}{}
		if l == "" {
			s.any = true
		}
	}
	return s
}

// maxIndexedPath bounds the paths prefixSet.covers looks up in its index
// (a stack buffer holds the lower-case copy); longer ones are scanned.
const maxIndexedPath = 256

// covers reports whether x (a clean path without trailing slash) starts
// with one of the prefixes in any letter case, at a segment boundary. For
// an ASCII path, a prefix matches exactly when it equals the lower-case
// path up to a "/" or its end: strings.EqualFold folds a non-ASCII rune of
// a prefix only to another non-ASCII rune or to a letter of another byte
// length (the Kelvin sign and "ſ"), so no prefix the scan would accept is
// missed. Other paths take the scan, the rule itself.
func (s *prefixSet) covers(x string) bool {
	if s == nil {
		return false
	}
	if s.any {
		return true
	}
	if s.index != nil && len(x) <= maxIndexedPath {
		var buf [maxIndexedPath]byte
		ascii := true
		for i := 0; i < len(x); i++ {
			c := x[i]
			if c >= 0x80 {
				ascii = false
				break
			}
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		if ascii {
			lx := buf[:len(x)]
			for i := 1; i <= len(lx); i++ {
				if i < len(lx) && lx[i] != '/' {
					continue
				}
				if _, ok := s.index[string(lx[:i])]; ok {
					return true
				}
			}
			return false
		}
	}
	for _, l := range s.prefixes {
		// Case-insensitive: every case and slash variant of x is x in
		// lower case, with or without the trailing slash.
		if l == "" || len(x) >= len(l) && strings.EqualFold(x[:len(l)], l) && (len(x) == len(l) || x[len(l)] == '/') {
			return true
		}
	}
	return false
}

// compileVariants precomputes what Decide's fast path needs: the methods
// some route enforces, each route's rivals per method (for path variants),
// and per strictness of the request's method the rivals of each other
// enforced method (for a _method override in a JSON body).
//
// The routes that rival one depend only on its scope, its strictness and
// the method, so each such set is built once and shared: with 1,000 routes
// in a few scopes this keeps New linear in the routes, not quadratic
// (BenchmarkNew1000Routes).
func (p *Policy) compileVariants() {
	all := append(slices.Clone(p.routes), p.defaults)
	p.enforced = nil
	for _, rt := range all {
		if rt.Mode != ModeEnforce {
			continue
		}
		for _, m := range rt.Methods {
			if !slices.Contains(p.enforced, m) {
				p.enforced = append(p.enforced, m)
			}
		}
	}
	type setKey struct {
		overrides bool // the rule of the method variants, else of the path variants
		scope     string
		method    string
		s         Strictness
	}
	type built struct {
		set      *prefixSet
		hosted   []hostedSet
		defaults bool
	}
	sets := map[setKey]built{}
	// rivalsOf returns, for path variants, the routes that govern m at
	// least as strictly as s under another scope than scope, or more
	// strictly (the defaults route only when more strictly, since it never
	// wins a tie against a declared route); for method variants, the
	// routes that enforce m under another scope, or more strictly than s
	// (methodVariant).
	rivalsOf := func(k setKey) built {
		if b, ok := sets[k]; ok {
			return b
		}
		var b built
		var prefixes []string
		hosted := map[string][]string{}
		for _, o := range all {
			so := o.Strictness(k.method)
			if so == NotEnforced {
				continue
			}
			if k.overrides && so <= k.s && o.scope() == k.scope {
				// Same scope, not stricter: nothing to escape.
				continue
			}
			// Method variants: methodVariant refuses a route of another
			// scope at any enforced strictness, a weaker one included
			// (the operation, sent as that method with the same key,
			// would be claimed again under the other scope). Leaving the
			// weaker ones out let a keyed JSON request to a required
			// route skip reading a body whose _method the full check
			// refuses.
			if !k.overrides && (so < k.s || so == k.s && (o.scope() == k.scope || o == p.defaults)) {
				continue
			}
			switch h := patternHost(o.Match); {
			case o == p.defaults:
				b.defaults = true
			case h != "":
				hosted[h] = append(hosted[h], literalPrefix(o.Match))
			default:
				prefixes = append(prefixes, literalPrefix(o.Match))
			}
		}
		if len(prefixes) > 0 {
			b.set = newPrefixSet(prefixes)
		}
		for _, h := range slices.Sorted(maps.Keys(hosted)) {
			b.hosted = append(b.hosted, hostedSet{host: h, set: newPrefixSet(hosted[h])})
		}
		sets[k] = b
		return b
	}
	p.matchers = make(map[string]*shapeSet, len(p.enforced))
	for _, m := range p.enforced {
		s := &shapeSet{need: map[string]int{}}
		for _, rt := range p.routes {
			if pm := patternMethod(rt.Match); pm == "" || pm == m || pm == http.MethodGet && m == http.MethodHead {
				s.add(rt.Match, rt.Strictness(m) > NotEnforced)
			}
		}
		p.matchers[m] = s
	}
	p.rivals = make(map[*Route][]rival, len(all))
	p.overrides = make(map[*Route][EnforcedRequired + 1][]rival, len(all))
	for _, rt := range all {
		subtree := ""
		if pat := patternPath(rt.Match); strings.HasSuffix(pat, "/") && !strings.Contains(pat, "{") && pat == strings.ToLower(pat) {
			subtree = literalPrefix(rt.Match)
		}
		var rvs []rival
		for _, m := range p.enforced {
			b := rivalsOf(setKey{scope: rt.scope(), method: m, s: rt.Strictness(m)})
			if b.defaults || b.set != nil || b.hosted != nil {
				rvs = append(rvs, rival{method: m, set: b.set, hosted: b.hosted, defaults: b.defaults, subtree: subtree})
			}
		}
		p.rivals[rt] = rvs

		// Method variants: with the request's own method at strictness s,
		// any route that governs m more strictly, or as strictly under
		// another scope, could refuse the request (methodVariant). The
		// subtree argument of mayVary holds only for the methods rt's
		// pattern matches: for others a variant may fall to the defaults.
		pm := patternMethod(rt.Match)
		var byLevel [EnforcedRequired + 1][]rival
		for s := NotEnforced; s <= EnforcedRequired; s++ {
			for _, m := range p.enforced {
				b := rivalsOf(setKey{overrides: true, scope: rt.scope(), method: m, s: s})
				if !b.defaults && b.set == nil && b.hosted == nil {
					continue
				}
				rv := rival{method: m, set: b.set, hosted: b.hosted, defaults: b.defaults}
				if pm == "" || pm == m || pm == http.MethodGet && m == http.MethodHead {
					rv.subtree = subtree
				}
				byLevel[s] = append(byLevel[s], rv)
			}
		}
		p.overrides[rt] = byLevel
	}
}

// patternPath returns the path of a ServeMux pattern "[METHOD ][HOST]/PATH",
// or "" for the defaults route.
func patternPath(pattern string) string {
	rest := pattern
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		rest = strings.TrimLeft(rest[i:], " \t")
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return ""
}

// literalPrefix returns the path of a ServeMux pattern up to its first
// wildcard, lower case, without a trailing slash: "POST api.x/v1/Items/{id}"
// is "/v1/items"; "" for the defaults route and for "/".
func literalPrefix(pattern string) string {
	rest := patternPath(pattern)
	if i := strings.IndexByte(rest, '{'); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSuffix(strings.ToLower(rest), "/")
}

// pathForm is one path variant: an escaped path (matched as sent, its
// escapes kept) or a decoded one.
type pathForm struct {
	path    string
	escaped bool
	raw     bool // the form as sent: its route is the matched one
}

// maxPathForms bounds the path forms a request is matched in: past it the
// request is refused (ambiguous-request) rather than matched hundreds of
// times. A path combining every normalization Decide knows would have
// several hundred forms; a legitimate one has at most a few dozen.
const maxPathForms = 64

// maxDecodes bounds how many times in all (net/http's decoding included) a
// path is decoded for its variants: a hop that decodes once more than the
// upstream's router reads "%252F" as "/"; three rounds cover "%25252F",
// and the bound keeps a crafted path from multiplying the matches.
const maxDecodes = 3

// pathForms returns r's path variants, most normalized first: decoded
// (most rounds first) before escaped, "\" as "/" and ";" parameters
// stripped before kept, extension and trailing dots removed before kept
// (tailForms), each cleaned of dot segments and repeated slashes, lower
// case before as sent, without trailing slash before with. Duplicates are
// dropped. A CONNECT request (authority, not path) has none. Past
// maxPathForms forms it stops, and reports that the list is cut short.
func pathForms(r *http.Request) ([]pathForm, bool) {
	if r.Method == http.MethodConnect {
		return nil, false
	}
	esc := r.URL.EscapedPath()
	rawPath := CleanPath(esc)
	type source struct {
		path    string
		escaped bool
	}
	var buf [maxDecodes + 1]source // decoded again, decoded, escaped
	sources := buf[:0]
	var again []string
	for dec, i := r.URL.Path, 1; i < maxDecodes && strings.ContainsRune(dec, '%'); i++ {
		next, err := url.PathUnescape(dec)
		if err != nil || next == dec {
			break
		}
		again, dec = append(again, next), next
	}
	for i := len(again) - 1; i >= 0; i-- {
		sources = append(sources, source{again[i], false})
	}
	if r.URL.RawPath != "" || strings.ContainsRune(r.URL.Path, ' ') {
		// RawPath is set exactly when the path was sent with escapes that
		// differ from the default encoding: %2F, %2E, %5C, an escaped letter.
		// A space is escaped in the default encoding: only the decoded
		// path shows it trailing a segment.
		sources = append(sources, source{r.URL.Path, false})
	}
	sources = append(sources, source{esc, true})
	var out []pathForm
	full := false
	add := func(path string, escaped bool) {
		if escaped && !strings.ContainsRune(path, '%') {
			escaped = false
		}
		for _, f := range out {
			if f.path == path && f.escaped == escaped {
				return
			}
		}
		if len(out) == maxPathForms {
			full = true
			return
		}
		out = append(out, pathForm{path: path, escaped: escaped})
	}
gen:
	for _, src := range sources {
		backslash := strings.ContainsRune(src.path, '\\') || src.escaped && containsFold(src.path, "%5c")
		params := strings.ContainsRune(src.path, ';')
		for _, bs := range []bool{true, false} {
			if bs && !backslash {
				continue
			}
			for _, st := range []bool{true, false} {
				if st && !params {
					continue
				}
				base := src.path
				if bs {
					base = strings.ReplaceAll(base, `\`, "/")
					if src.escaped {
						base = strings.ReplaceAll(strings.ReplaceAll(base, "%5C", "/"), "%5c", "/")
					}
				}
				if st {
					base = stripParams(base)
				}
				var tailBuf [4]string
				for _, tail := range tailForms(tailBuf[:0], CleanPath(base)) {
					cases := []string{tail}
					if lower := strings.ToLower(tail); lower != tail {
						cases = []string{lower, tail}
					}
					for _, c := range cases {
						trimmed, slashed := c, c
						if len(c) > 1 && strings.HasSuffix(c, "/") {
							trimmed = strings.TrimSuffix(c, "/")
						} else if c != "/" {
							slashed = c + "/"
						}
						add(trimmed, src.escaped)
						add(slashed, src.escaped)
						if full {
							break gen
						}
					}
				}
			}
		}
	}
	for i := range out {
		if out[i].path == rawPath && (out[i].escaped || !strings.ContainsRune(rawPath, '%')) {
			out[i].raw = true
		}
	}
	return out, full
}

// tailForms appends to dst the clean path p and its variants with the
// last segment's format extension removed (stripExtension) and with
// trailing dots and spaces stripped from every segment (trimSegmentTails),
// each alone and combined, most normalized first and p last, without
// duplicates. Rails runs /v1/orders.json as /v1/orders, IIS and Windows
// hosts /v1/orders. and /v1/orders%20 too.
func tailForms(dst []string, p string) []string {
	x := strings.TrimSuffix(p, "/")
	var cand [4]string
	n := 0
	if hasSegmentTail(x) {
		dots := trimSegmentTails(x)
		cand[0], cand[1], n = stripExtension(dots), dots, 2
	}
	cand[n], cand[n+1] = stripExtension(x), p
	for _, f := range cand[:n+2] {
		if f == "" {
			f = "/"
		}
		if !slices.Contains(dst, f) {
			dst = append(dst, f)
		}
	}
	return dst
}

// stripExtension removes a ".ext" format extension from the last segment
// of x (a clean path without trailing slash), as Rails' "(.:format)" does:
// from the segment's last dot, when the extension is not empty and the
// stem is not only dots. The result is a prefix of x, still clean.
func stripExtension(x string) string {
	seg := x[strings.LastIndexByte(x, '/')+1:]
	i := strings.LastIndexByte(seg, '.')
	if i <= 0 || i == len(seg)-1 || strings.Trim(seg[:i], ".") == "" {
		return x
	}
	return x[:len(x)-len(seg)+i]
}

// hasSegmentTail reports whether a segment of x ends in "." or " ".
func hasSegmentTail(x string) bool {
	for i := 0; i < len(x); i++ {
		if (x[i] == '.' || x[i] == ' ') && (i+1 == len(x) || x[i+1] == '/') {
			return true
		}
	}
	return false
}

// trimSegmentTails strips trailing dots and spaces from every segment of
// x, as Windows path normalization (IIS) does, dropping segments that
// become empty; the result is clean, without trailing slash.
func trimSegmentTails(x string) string {
	var b strings.Builder
	for _, seg := range strings.Split(x, "/") {
		if seg = strings.TrimRight(seg, ". "); seg != "" {
			b.WriteByte('/')
			b.WriteString(seg)
		}
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// stripParams removes ";params" from every segment of p, as Tomcat and
// Jetty do with ";jsessionid=…" before routing.
func stripParams(p string) string {
	var b strings.Builder
	for i, seg := range strings.Split(p, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		b.WriteString(seg)
	}
	return b.String()
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
	return p.lookup(&http.Request{Method: method, Host: canonicalHost(r.Host), URL: u})
}

func (p *Policy) lookup(req *http.Request) *Route {
	if h, _ := p.mux.Handler(req); h != nil {
		if rh, ok := h.(routeHandler); ok {
			return rh.route
		}
	}
	return p.defaults
}

// headerOverrides reports whether r carries any method-override field
// (isOverrideField).
func headerOverrides(h http.Header) bool {
	for name, v := range h {
		if len(v) > 0 && isOverrideField(name) {
			return true
		}
	}
	return false
}

// overrideFields returns the names of h's method-override fields, sorted so
// a refusal names the same field every time.
func overrideFields(h http.Header) []string {
	var out []string
	for name, v := range h {
		if len(v) > 0 && isOverrideField(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// isOverrideField reports whether a field name is one of
// MethodOverrideHeaders in any letter case, with "_" and "-" taken as the
// same character: Rack, WSGI and CGI servers turn both into "_" (Go keeps
// X-HTTP_Method_Override as its own field, X-Http_method_override).
func isOverrideField(name string) bool {
	for _, o := range MethodOverrideHeaders {
		if len(name) == len(o) && equalFoldDash(name, o) {
			return true
		}
	}
	return false
}

// equalFoldDash compares two ASCII strings of one length ignoring letter
// case and treating "_" as "-".
func equalFoldDash(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
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

// splitMethods returns the upper-case methods a field value names: each
// comma-separated element, trimmed.
func splitMethods(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.ToUpper(strings.Trim(e, " \t")); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// mayHaveMethodParam is a cheap filter before methodParams: a key that
// isMethodName accepts spells out "method" or is escaped.
func mayHaveMethodParam(q string) bool {
	return strings.Contains(q, "method") || strings.ContainsRune(q, '%')
}

// methodParams returns the upper-case values of every _method key
// (isMethodName) in a query or urlencoded form ("&" and ";" separate pairs, "+" is a space,
// malformed escapes are kept as sent).
func methodParams(q string) []string {
	var out []string
	for q != "" {
		var pair string
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			pair, q = q, ""
		}
		k, v, _ := strings.Cut(pair, "=")
		if !isMethodName(unescapeForm(k)) {
			continue
		}
		out = append(out, splitMethods(unescapeForm(v))...)
	}
	return out
}

// isMethodName reports whether a decoded query or form parameter name
// reaches a framework as _method: as sent, or as PHP registers it (Laravel,
// Symfony): the name read up to a NUL byte, leading spaces dropped (or not:
// both are taken), ".", " " and an unmatched "[" as "_", and "_method[…]"
// an array named _method.
func isMethodName(k string) bool {
	if k == "_method" {
		return true
	}
	if !strings.Contains(k, "method") {
		return false
	}
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
	if i := strings.IndexByte(k, '['); i > 0 && strings.IndexByte(k[i+1:], ']') >= 0 {
		k = k[:i]
	}
	return phpMethodName(k) || phpMethodName(strings.TrimLeft(k, " "))
}

// phpMethodName reports whether k is "_method" once ".", " " and "[" are
// read as "_", without allocating.
func phpMethodName(k string) bool {
	const want = "_method"
	if len(k) != len(want) {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '.' || c == ' ' || c == '[' {
			c = '_'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

func unescapeForm(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// bodyKind says whether a framework may read a _method member from a
// request body, and how.
type bodyKind int

const (
	noBody bodyKind = iota
	// formBody: application/x-www-form-urlencoded, multipart/form-data, or
	// no media type at all (Rack's form_data? reads a POST without
	// Content-Type as a form).
	formBody
	// jsonBody: a Content-Type naming "/json" or "+json", as Laravel's
	// isJson tests it; Laravel and Express method-override getters read
	// input from such a body.
	jsonBody
)

// bodyKindOf returns how r's body may carry a _method member, from its
// method and Content-Type alone; GET and HEAD bodies are never read.
func bodyKindOf(r *http.Request) bodyKind {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return noBody
	}
	v := r.Header["Content-Type"]
	if len(v) == 0 {
		return formBody
	}
	mt, _, _ := strings.Cut(v[0], ";")
	mt = strings.TrimSpace(mt)
	switch {
	case mt == "", strings.EqualFold(mt, "application/x-www-form-urlencoded"), strings.EqualFold(mt, "multipart/form-data"):
		return formBody
	case containsFold(v[0], "/json"), containsFold(v[0], "+json"):
		return jsonBody
	}
	return noBody
}

// containsFold reports whether s contains the lower-case ASCII substr in
// any letter case, without allocating.
func containsFold(s, substr string) bool {
	for i := 0; i+len(substr) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(substr)], substr) {
			return true
		}
	}
	return false
}

// maxMethodField bounds the _method value read from a multipart part.
const maxMethodField = 64

// bodyMethods returns how a refusal names the body's override, and the
// upper-case values of every _method member of r's body: the fields of a
// form (formMethods) or the top-level string members of a JSON object
// (jsonMethods).
func bodyMethods(r *http.Request, body []byte) (string, []string) {
	if len(body) == 0 {
		return "", nil
	}
	switch bodyKindOf(r) {
	case formBody:
		return "the _method form field", formMethods(r.Header.Get("Content-Type"), body)
	case jsonBody:
		return "the _method member of the JSON body", jsonMethods(body)
	}
	return "", nil
}

// formMethods returns the upper-case values of every _method field
// (isMethodName) of a form body with this content type ("" reads as
// urlencoded); none for other bodies or parse errors. A malformed parameter
// of the content type does not stop the urlencoded body being read: Rack
// and PHP read it by the media type alone.
func formMethods(contentType string, body []byte) []string {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	switch mt {
	case "", "application/x-www-form-urlencoded":
		if !bytes.Contains(body, []byte("method")) && !bytes.ContainsRune(body, '%') {
			return nil
		}
		return methodParams(string(body))
	case "multipart/form-data":
		_, params, err := mime.ParseMediaType(contentType)
		if err != nil || params["boundary"] == "" {
			return nil
		}
		var out []string
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				return out
			}
			if isMethodName(part.FormName()) {
				v, _ := io.ReadAll(io.LimitReader(part, maxMethodField))
				out = append(out, splitMethods(string(v))...)
			}
		}
	}
	return nil
}

// jsonMethods returns the upper-case values of every top-level string
// member "_method" of a JSON object (duplicates included: parsers differ on
// which one wins), up to the first syntax error; none for other values. A
// leading byte order mark is skipped. Member names are compared after JSON
// unescaping, as PHP's json_decode and JSON.parse read them.
func jsonMethods(body []byte) []string {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if !bytes.Contains(body, []byte("_method")) && !bytes.ContainsRune(body, '\\') {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		v, err := dec.Token()
		if err != nil {
			return out
		}
		if d, ok := v.(json.Delim); ok {
			if skipJSON(dec, d) != nil {
				return out
			}
			continue
		}
		if k, _ := t.(string); k == "_method" {
			if m, ok := v.(string); ok {
				out = append(out, splitMethods(m)...)
			}
		}
	}
	return out
}

// skipJSON reads the rest of the array or object that open began.
func skipJSON(dec *json.Decoder, open json.Delim) error {
	if open != '{' && open != '[' {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

func isUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return false
		}
	}
	return true
}

// isCanonicalPath reports whether r's path needs no variant but its letter
// case, trailing slash, extension and trailing dots, which mayVary covers:
// sent in the default encoding (no RawPath), clean, without backslashes,
// ";" parameters or "%" (a decoded "%" was sent as "%25", which a hop that
// decodes again reads as an escape).
func isCanonicalPath(u *url.URL) bool {
	if u.RawPath != "" {
		return false
	}
	p := u.Path
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\' || c == ';' || c == '%':
			return false
		}
	}
	return isClean(p)
}

// isClean reports whether CleanPath(p) == p, without allocating: rooted,
// no empty, "." or ".." segment except a trailing empty one.
func isClean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	start := 1 // of the current segment
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case ".", "..":
			return false
		case "":
			if i < len(p) {
				return false // "//"
			}
		}
		start = i + 1
	}
	return true
}
