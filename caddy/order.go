package caddyidem

import (
	"reflect"
	"slices"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
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
// top-level idempotency ordered after them runs.
var blockDirectives = []string{"invoke", "handle", "handle_path", "route"}

// backendDirectives are the directives that send a request on to a
// backend, and invoke, whose named route may.
var backendDirectives = []string{"reverse_proxy", "php_fastcgi", "invoke"}

// checkPlace refuses an idempotency directive at the top of a site that
// would never see the keyed requests a handle, handle_path or route block
// (or invoke) of the same site sends to a backend: ordered after those
// blocks, it would enforce nothing on them, silently. Moving it first
// instead would run it before an authentication written inside a block,
// which would then decide nothing of the owner (a client could name
// another's). So the user chooses: idempotency inside each block, after
// its authentication, or the global option "order idempotency before
// handle" (or before invoke) when authentication runs at the top of the
// site, which this check honours. file and line locate the directive.
func checkPlace(h httpcaddyfile.Helper, file string, line int) error {
	segs, ok := siteSegments(h)
	if !ok {
		return nil // not an httpcaddyfile whose block reads as below: not checked
	}
	top := false
	for _, seg := range segs {
		if len(seg) > 0 && seg[0].Text == "idempotency" && seg[0].File == file && seg[0].Line == line {
			top = true
		}
	}
	if !top {
		return nil
	}
	order, _ := h.Option("order").([]string)
	for _, seg := range segs {
		dir := seg.Directive()
		if !slices.Contains(blockDirectives, dir) || before(order, "idempotency", dir) {
			continue
		}
		for _, tok := range seg[1:] {
			if slices.Contains(backendDirectives, tok.Text) || dir == "invoke" {
				return h.Errf("idempotency at the top of this site comes after its %s (%s:%d) in Caddy's directive order, so it would never see the requests that block sends to a backend: "+
					"put idempotency inside the block (after any authentication there), or, when authentication runs at the top of the site, "+
					"set the global option 'order idempotency before %s'", dir, seg[0].File, seg[0].Line, dir)
			}
		}
	}
	return nil
}

// before reports whether a comes before b in order, the Caddyfile's own
// directive order ("order" global options), or in the default order when
// it has none (idempotency then comes after every block directive).
func before(order []string, a, b string) bool {
	if order == nil {
		return false
	}
	ia, ib := slices.Index(order, a), slices.Index(order, b)
	return ia >= 0 && ib >= 0 && ia < ib
}

// siteSegments returns the directives at the top of the site block h is
// parsing in: httpcaddyfile keeps the block in the Helper without an
// accessor, so it is read by reflection, tokens' text, file and line only
// (reading, never writing; ok false when the Helper no longer holds it
// so, and then nothing is checked: TestCaddyTopLevelBesideBlocksRefused
// fails on a Caddy whose Helper changed).
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
			seg[j] = caddyfile.Token{File: t.FieldByName("File").String(), Line: int(t.FieldByName("Line").Int()), Text: t.FieldByName("Text").String()}
		}
		segs = append(segs, seg)
	}
	return segs, true
}
