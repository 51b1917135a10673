package proxy

import (
	"net/http"
	"slices"
	"time"

	"github.com/idemgate/idemgate/policy"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// checkV1 looks, for a key this request has just claimed fresh, for the
// record that idemgate wrote before layout 2 (docs/protocol.md, "Layout
// versions"): layout 1 scoped records by the route's name, so an operation
// completed or running before the upgrade is found only there. The fresh
// claim is held meanwhile, so no other instance of this version can forward
// the same key while the old record is read. It returns decideV1's action
// on what it found and the identity of the old record, which a stepWait
// waits on.
func (p *Proxy) checkV1(r *http.Request, ex *exchange) (action, store.Identity) {
	route := ex.route
	var (
		old store.Identity
		rec *store.Record
	)
	for _, name := range p.v1Names(r, ex) {
		old, _ = identity.Layout1(ex.id, name)
		ctx := p.storeCtx(r.Context())
		var err error
		rec, err = p.store.Get(ctx, old)
		ctx.cancel()
		if err != nil {
			return action{step: stepStoreFailed, release: releaseNow, op: "claim", err: err}, old
		}
		if rec.Layout1() {
			break
		}
		// A record of a later layout under a scope equal to this route's
		// name belongs to the routes of that scope, not to this request.
		rec = nil
	}
	s := v1State{rec: rec, route: route, draining: p.draining.Load(), now: time.Now()}
	if rec != nil {
		s.fp = route.FingerprintOf(r, ex.body)
		s.held = route.OnAbandoned != policy.AbandonedReject && p.holdTakeover(route)
	}
	a := decideV1(s)
	if a.takeover {
		// Logged here, so the line says which layout was taken over.
		p.m.Takeover(route.Name)
		p.log.Warn("took over an abandoned claim of layout 1", "route", route.Name, "key_hash", keyHash(ex.id))
		a.takeover = false
	}
	return a, old
}

// v1Names returns the scopes under which a layout 1 record of this request
// may sit: the name of the route that governs it now and the names of the
// routes that governed it under every earlier policy this process served
// (Options.PreviousPolicies: a reload that renames a route, removes it or
// adds a more specific one must not hide the records written under the old
// name; TestV1RecordsFoundAfterRename), less the request's own layout
// 2 scope. Empty when v1 lookups are off.
func (p *Proxy) v1Names(r *http.Request, ex *exchange) []string {
	if !p.v1Lookup {
		return nil
	}
	var names []string
	add := func(name string) {
		if _, ok := identity.Layout1(ex.id, name); ok && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	add(ex.route.Name)
	if p.previous != nil {
		for _, old := range p.previous() {
			add(old.Decide(r).Route.Name)
		}
	}
	return names
}
