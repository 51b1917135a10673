package caddyidem

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
)

// The directive's place in Caddy's order, and the sites where that place
// would leave keyed requests unprotected.

// orderedBefore is the directive idempotency is ordered before when the
// Caddyfile sets no order of its own: after authentication (basic_auth,
// forward_auth) and after invoke, handle, handle_path and route, so that
// an authentication inside a block always runs before an idempotency
// inside the same block.
const orderedBefore = "reverse_proxy"

// blockDirectives are the directives that come before reverse_proxy in
// Caddy's order and hand a request to handlers of their own: a block (or
// named route) among them whose backend answers ends the request before a
// top-level idempotency ordered after them runs. intercept runs its
// handle_response routes after the handlers it wraps answered, so a
// backend there is reached by every attempt, a replay's too.
var blockDirectives = []string{"intercept", "invoke", "handle", "handle_path", "route"}

// backendDirectives are the directives that send a request on to a
// backend, and invoke, whose named route may.
var backendDirectives = []string{"reverse_proxy", "php_fastcgi", "invoke"}

// authDirectives are the directives that authenticate a request, and so
// may set what the owner is read from (forward_auth's copy_headers,
// basic_auth's user): Caddy's own and those of the common authentication
// plugins (caddy-jwt, caddy-security).
var authDirectives = []string{"basic_auth", "basicauth", "forward_auth", "jwtauth", "authenticate", "authorize"}

// checkPlace refuses an idempotency directive that would never see the
// keyed requests a handle, handle_path or route block (or invoke) beside
// it sends to a backend: at the top of a site, or inside a handle,
// handle_path or handle_errors block or a named route, whose directives
// Caddy sorts by the same order, it comes after those blocks, and would
// enforce nothing on them, silently; likewise beside (or inside a block
// wrapped by) an intercept whose handle_response reaches a backend.
// Moving it first instead would run it before an authentication written
// inside a block, which would then decide nothing of the owner (a client
// could name another's). So the user chooses:
// idempotency inside each block, after its authentication (a block with
// an idempotency of its own is checked where that one is), or the global
// option "order idempotency before handle" (or before invoke) when
// authentication runs before the blocks, which this check honours while
// no authentication comes after idempotency (checkAuthAround). Inside a
// route block, whose directives run as written, it is refused when
// written after such a block, or before an authentication. A
// request_header that sets one of fields, the request fields the owner is
// read from (ownerFields), counts as an authentication: idempotency
// before it would read the client's own field. file and line locate the
// directive.
func checkPlace(h httpcaddyfile.Helper, file string, line int, fields []string) error {
	// A snippet imported twice puts two directives at one file and line:
	// the import chain tells them apart.
	file = withImports(file, reflect.ValueOf(h.Token()))
	segs, ok := siteSegments(h)
	if !ok {
		return nil // not an httpcaddyfile whose block reads as below: not checked
	}
	if h.IsNamedRoute() && len(segs) == 1 {
		// A named route's block is one segment, its name then its
		// braces; Caddy sorts its directives as a handle block's.
		segs = innerSegments(segs[0])
	}
	order, _ := h.Option("order").([]string)
	if order == nil {
		order = defaultOrder
	}
	_, err := checkBlock(h, segs, true, order, fields, file, line)
	return err
}

// ownerFields are the request fields the owner of the configuration at
// path (with overrides) is read from, by its defaults or any route (owner:
// header:NAME, alone or in a list), in canonical form: a request_header
// that sets one after idempotency runs leaves it the client's own
// (checkPlace). None when the configuration does not load here: Caddy
// refuses it when it provisions the handler.
func ownerFields(path string, overrides map[string]string) []string {
	cfg, err := loadConfig(path, os.Environ(), overrides)
	if err != nil {
		return nil
	}
	var fields []string
	add := func(r *policy.Route) {
		for _, o := range append([]identity.OwnerSource{r.Owner}, r.Owner.Parts...) {
			if o.Kind == identity.OwnerHeader && !slices.Contains(fields, o.Header) {
				fields = append(fields, o.Header)
			}
		}
	}
	add(cfg.Policy.Defaults())
	for _, r := range cfg.Policy.Routes() {
		add(r)
	}
	return fields
}

// checkBlock looks for the directive at file:line among segs, the
// directives of one block (sorted tells whether Caddy sorts them), and
// in the blocks nested in them; found tells whether it is there.
func checkBlock(h httpcaddyfile.Helper, segs []caddyfile.Segment, sorted bool, order, fields []string, file string, line int) (found bool, err error) {
	for i, seg := range segs {
		if isDirectiveAt(seg, file, line) {
			if !sorted {
				if err := checkWrittenBefore(h, segs[:i]); err != nil {
					return true, err
				}
				return true, checkAuthAround(h, segs, i, false, order, fields)
			}
			if err := checkSiblings(h, segs, order); err != nil {
				return true, err
			}
			return true, checkAuthAround(h, segs, i, true, order, fields)
		}
	}
	for i, seg := range segs {
		dir := seg.Directive()
		if !slices.Contains(nestingDirectives, dir) {
			continue
		}
		found, err := checkBlock(h, innerSegments(seg), dir != "route", order, fields, file, line)
		if !found {
			continue
		}
		if err == nil && dir != "handle_errors" {
			err = checkAuthAround(h, segs, i, sorted, order, fields)
		}
		if err == nil && dir != "handle_errors" {
			// An intercept beside the block that holds idempotency wraps
			// it, when it comes first (Caddy's order, or as written in a
			// route), and its backend is reached by every attempt.
			wrapping := segs
			if !sorted {
				wrapping = segs[:i]
			}
			for _, w := range wrapping {
				if w.Directive() == "intercept" && bypasses(w) && (!sorted || before(order, "intercept", dir)) {
					err = h.Errf("the intercept (%s:%d) around the %s that holds this idempotency reaches a backend on every attempt of a key, a replay's included: "+
						"put idempotency at the top of the site with the global option 'order idempotency before intercept'", fileOf(w[0]), w[0].Line, dir)
				}
			}
		}
		return true, err
	}
	return false, nil
}

// nestingDirectives are the directives whose block holds directives of
// their own that may hold an idempotency: route runs them as written,
// the others sort them.
var nestingDirectives = []string{"handle", "handle_path", "route", "handle_errors"}

// checkSiblings refuses the block segs when one of its block directives
// (or invoke) sorted before idempotency reaches a backend without an
// idempotency of its own.
func checkSiblings(h httpcaddyfile.Helper, segs []caddyfile.Segment, order []string) error {
	for _, seg := range segs {
		dir := seg.Directive()
		if !before(order, "idempotency", dir) && bypasses(seg) {
			return h.Errf("idempotency at this level of the site comes after its %s (%s:%d) in Caddy's directive order, so it would never see the requests that block sends to a backend: "+
				"put idempotency inside the block (after any authentication there), or, when authentication runs before the blocks, "+
				"set the global option 'order idempotency before %s'", dir, fileOf(seg[0]), seg[0].Line, dir)
		}
	}
	return nil
}

// defaultOrder is Caddy's default directive order (httpcaddyfile's
// defaultDirectiveOrder, of the Caddy pinned in go.mod) from the
// authentication on, with idempotency in its place (orderedBefore): what
// a Caddyfile without the global option "order" sorts by. A plugin's
// directive is not in it, and counts as running before the blocks.
var defaultOrder = []string{"basicauth", "basic_auth", "forward_auth", "request_header", "encode", "push",
	"intercept", "templates", "invoke", "handle", "handle_path", "route", "abort", "error", "copy_response",
	"respond", "metrics", "idempotency", "reverse_proxy", "php_fastcgi", "file_server", "acme_server"}

// exclusiveDirectives are the blocks of which Caddy runs at most one per
// request among those beside each other: a handle block, and a
// handle_path one, never runs after another.
var exclusiveDirectives = []string{"handle", "handle_path"}

// checkAuthAround refuses an idempotency when an authentication (or a
// request_header that sets one of fields, the owner's), or a block that
// holds one, runs after segs[i] (idempotency itself, or
// the block that holds it) in segs, one block of the site: idempotency
// would read the owner before the authentication set it, and replay a
// record to a client that names another's owner (a forged X-User beside
// the client's own token, or no credentials at all). What runs after
// segs[i]: in a sorted block, a directive that sorts after its own in
// order, or another of the same directive (Caddy sorts those by their
// matchers), unless both are of the blocks Caddy runs one of
// (exclusiveDirectives); in a route block, one written after it. It is
// called at each level from idempotency's up to the site's, so no
// enclosing level lets an authentication run after idempotency. An
// invoke's named route is not looked into.
func checkAuthAround(h httpcaddyfile.Helper, segs []caddyfile.Segment, i int, sorted bool, order, fields []string) error {
	dir := segs[i].Directive()
	for j, seg := range segs {
		if j == i {
			continue
		}
		other := seg.Directive()
		after := j > i
		switch {
		case sorted && slices.Contains(exclusiveDirectives, dir) && slices.Contains(exclusiveDirectives, other):
			after = false
		case sorted && other == dir:
			// Caddy sorts blocks of one directive by their matchers'
			// specificity, not as written: either may run first.
			after = true
		case sorted:
			after = before(order, dir, other)
		}
		if !after {
			continue
		}
		if auth, ok := authIn(seg, fields); ok {
			return authErr(h, segs[i], sorted, seg, auth)
		}
	}
	return nil
}

// authErr is checkAuthAround's error for auth (an authentication, or a
// request_header that sets the owner's field), found in seg (itself, or
// a block that holds it), which runs after holder (idempotency, or the
// block that holds it) in a block that is sorted or not.
func authErr(h httpcaddyfile.Helper, holder caddyfile.Segment, sorted bool, seg caddyfile.Segment, auth caddyfile.Token) error {
	kind := "authentication"
	if auth.Text == "request_header" {
		kind = "request_header"
	}
	where := fmt.Sprintf("the %s (%s:%d)", auth.Text, fileOf(auth), auth.Line)
	if seg[0].File != auth.File || seg[0].Line != auth.Line {
		where += fmt.Sprintf(" inside the %s (%s:%d)", seg.Directive(), fileOf(seg[0]), seg[0].Line)
	}
	what, instead := "", "the "+kind+" at the top of the site before idempotency"
	switch {
	case holder.Directive() != "idempotency":
		what = fmt.Sprintf("idempotency inside the %s (%s:%d) runs before %s", holder.Directive(), fileOf(holder[0]), holder[0].Line, where)
		instead = "the " + kind + " before the block that holds idempotency"
	case sorted:
		what = "idempotency comes before " + where + " in the directive order the global option 'order' sets"
	default:
		what = "idempotency is written before " + where + " in its route block, which runs its directives as written"
	}
	return h.Errf("%s, so it would read the owner before that %s sets it, and replay one client's record to another who names its owner: "+
		"put idempotency after the %s (inside the block, after it), or %s", what, kind, kind, instead)
}

// authIn finds an authentication directive in seg, or a request_header
// that sets one of fields (setsField): seg itself, or one in the blocks it
// holds, at any depth.
func authIn(seg caddyfile.Segment, fields []string) (caddyfile.Token, bool) {
	if len(seg) == 0 {
		return caddyfile.Token{}, false
	}
	if slices.Contains(authDirectives, seg.Directive()) || setsField(seg, fields) {
		return seg[0], true
	}
	for _, inner := range innerSegments(seg) {
		if auth, ok := authIn(inner, fields); ok {
			return auth, true
		}
	}
	return caddyfile.Token{}, false
}

// setsField reports whether seg is a request_header that sets or changes
// one of fields, the request fields an owner is read from (ownerFields):
// one that runs after idempotency would leave it reading the client's
// own field, as an authentication after it would. Its field is its first
// argument after a matcher (request_header has no block form); a field it
// only deletes (-Name) sets nothing.
func setsField(seg caddyfile.Segment, fields []string) bool {
	if len(fields) == 0 || seg.Directive() != "request_header" || len(seg) < 2 {
		return false
	}
	field := seg[1].Text
	if (strings.HasPrefix(field, "@") || strings.HasPrefix(field, "/") || field == "*") && len(seg) > 2 {
		field = seg[2].Text
	}
	if strings.HasPrefix(field, "-") {
		return false
	}
	field = strings.TrimLeft(field, "+>")
	return slices.ContainsFunc(fields, func(f string) bool { return strings.EqualFold(f, field) })
}

// checkWrittenBefore refuses an idempotency in a route block written
// after a block directive (or invoke) of the route that reaches a
// backend: a route runs its directives as written, so that block's
// requests would end before idempotency; moving it up is the way out.
func checkWrittenBefore(h httpcaddyfile.Helper, segs []caddyfile.Segment) error {
	for _, seg := range segs {
		if bypasses(seg) {
			return h.Errf("idempotency is written after the %s (%s:%d) of its route block, which runs its directives as written, so it would never see the requests that block sends to a backend: "+
				"write idempotency before it", seg.Directive(), fileOf(seg[0]), seg[0].Line)
		}
	}
	return nil
}

// bypasses reports whether seg is a block directive (or invoke) that
// reaches a backend without an idempotency of its own (one there is
// checked where it is parsed).
func bypasses(seg caddyfile.Segment) bool {
	dir := seg.Directive()
	if !slices.Contains(blockDirectives, dir) {
		return false
	}
	if dir == "invoke" {
		return true
	}
	if slices.ContainsFunc(innerSegments(seg), func(s caddyfile.Segment) bool { return s.Directive() == "idempotency" }) {
		return false
	}
	return slices.ContainsFunc(seg[1:], func(t caddyfile.Token) bool { return slices.Contains(backendDirectives, t.Text) })
}

// isDirectiveAt reports whether seg is the idempotency directive at
// file:line.
func isDirectiveAt(seg caddyfile.Segment, file string, line int) bool {
	return len(seg) > 0 && seg[0].Text == "idempotency" && seg[0].File == file && seg[0].Line == line
}

// innerSegments splits the block of seg (the tokens between its first
// "{" and the matching "}") into its directives: a directive starts on a
// line of its own at the block's depth.
func innerSegments(seg caddyfile.Segment) []caddyfile.Segment {
	start := slices.IndexFunc(seg, func(t caddyfile.Token) bool { return t.Text == "{" })
	if start < 0 {
		return nil
	}
	var segs []caddyfile.Segment
	depth := 0
	for i := start + 1; i < len(seg); i++ {
		tok, prev := seg[i], seg[i-1]
		switch {
		case tok.Text == "}" && depth == 0:
			return segs
		case depth == 0 && (i == start+1 || newLine(prev, tok)):
			segs = append(segs, caddyfile.Segment{tok})
		case len(segs) > 0:
			segs[len(segs)-1] = append(segs[len(segs)-1], tok)
		}
		switch tok.Text {
		case "{":
			depth++
		case "}":
			depth--
		}
	}
	return segs
}

// newLine reports whether tok starts a line after prev (a token from an
// imported snippet or file counts as on a line of its own).
func newLine(prev, tok caddyfile.Token) bool {
	return tok.File != prev.File || tok.Line != prev.Line+strings.Count(prev.Text, "\n")
}

// before reports whether a comes before b in order, the Caddyfile's own
// directive order ("order" global options) or defaultOrder; a directive
// not in it comes before none.
func before(order []string, a, b string) bool {
	ia, ib := slices.Index(order, a), slices.Index(order, b)
	return ia >= 0 && ib >= 0 && ia < ib
}

// importSep joins a token's file and its import chain in the File of the
// tokens siteSegments returns (fileOf takes the file back).
const importSep = "\x00"

// withImports is file followed by the import chain of t, a
// caddyfile.Token (the unexported Token.imports: each import's file,
// line and snippet), when it has one.
func withImports(file string, t reflect.Value) string {
	im := t.FieldByName("imports")
	if !im.IsValid() || im.Kind() != reflect.Slice || im.Len() == 0 {
		return file
	}
	chain := make([]string, im.Len())
	for i := range chain {
		chain[i] = im.Index(i).String()
	}
	return file + importSep + strings.Join(chain, importSep)
}

// fileOf is the file of a token siteSegments returns, without its import
// chain.
func fileOf(t caddyfile.Token) string {
	f, _, _ := strings.Cut(t.File, importSep)
	return f
}

// siteSegments returns the directives at the top of the site block (or
// named route) h is parsing in: httpcaddyfile keeps the block in the
// Helper without an accessor, so it is read by reflection: tokens' text,
// file and line only, a quoted brace's text with its quotes. It only
// reads; ok is false when the Helper no longer holds the block so, and
// then nothing is checked (TestCaddyTopLevelBesideBlocksRefused fails on
// a Caddy whose Helper changed).
func siteSegments(h httpcaddyfile.Helper) (segs []caddyfile.Segment, ok bool) {
	defer func() {
		if recover() != nil {
			segs, ok = nil, false
		}
	}()
	block := reflect.ValueOf(h).FieldByName("parentBlock")
	if !block.IsValid() {
		return nil, false
	}
	raw := block.FieldByName("Segments")
	if !raw.IsValid() || raw.Kind() != reflect.Slice {
		return nil, false
	}
	for i := range raw.Len() {
		s := raw.Index(i)
		seg := make(caddyfile.Segment, s.Len())
		for j := range s.Len() {
			t := s.Index(j)
			text := t.FieldByName("Text").String()
			if q := t.FieldByName("wasQuoted"); q.IsValid() && q.Int() != 0 && (text == "{" || text == "}") {
				// A quoted brace ("{" as respond's body) opens or
				// closes no block (Token.wasQuoted, unexported too).
				text = `"` + text + `"`
			}
			seg[j] = caddyfile.Token{File: withImports(t.FieldByName("File").String(), t), Line: int(t.FieldByName("Line").Int()), Text: text}
		}
		segs = append(segs, seg)
	}
	return segs, true
}
