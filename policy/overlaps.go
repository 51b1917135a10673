package policy

import (
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Routes overlap when one may govern a variant of a request that another
// matched (Policy.Decide). New finds, per route and enforced method, the
// overlapping routes that could take a request from it: those of another
// key scope at least as strict (rivals), indexed by literal path prefix and
// path shape, so that Decide checks a canonical request against them
// without building its variants.

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
// (docs/performance.md, "1,000 routes").
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
