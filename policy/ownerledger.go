package policy

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/policy/identity"
)

// OwnerConflicts returns an error naming each route of p that keeps
// records in a scope where a route of earlier (a policy p replaces) took
// its owners from another source of the same kind, nil when there is
// none. checkScopes refuses two such routes in one policy; across a reload
// the earlier route's records are still in the scope, and as header:X-User
// and header:X-Partner both store "h:42", partner 42 would be answered user
// 42's stored response (promise 2).
func (p *Policy) OwnerConflicts(earlier *Policy) error {
	var l OwnerLedger
	l.add(earlier)
	return l.conflicts(p)
}

// OwnerLedger remembers, for each scope and owner kind, the owner source
// the routes of every policy it admitted took their owners from, with no
// bound: the records of a policy stay in the store for their retention,
// however many reloads come after it, so a reloader that remembered only
// its last policies would let header:X-Partner into header:X-User's scope
// after a detour through another owner kind and enough reloads
// (TestReloadOwnerRefusalOutlivesManyReloads). It holds one entry per
// scope and kind, as a policy it admits never conflicts with it. Its zero
// value is empty and ready; it is safe for concurrent use.
type OwnerLedger struct {
	mu   sync.Mutex
	seen map[[2]string]ownerSeen // scope, ownerForm
}

// ownerForm is the form of the owner values r's source produces, as far
// as it tells two sources apart: their kind (each has its prefix); for
// jwt the number of claims, since "j:" and a JSON array of two values
// never equals one of a single value; for a list, the forms of its parts
// in order, since "m:" and a JSON array of parts of other forms, or of
// another number of parts, never equals it. A route moved from [sub] to
// [iss, sub], the safe way to accept a second issuer, or given one more
// source in its owner list, is no conflict
// (TestOwnerLedgerAdmitsAnotherNumberOfJWTClaims,
// TestOwnerLedgerAdmitsAnOwnerListOfAnotherForm).
func ownerForm(r *Route) string { return sourceForm(r.Owner, r.JWT) }

func sourceForm(o identity.OwnerSource, jwt *identity.JWTSettings) string {
	switch {
	case o.Kind == identity.OwnerJWT && jwt != nil:
		return fmt.Sprintf("%s/%d", o.Kind, len(jwt.Claims))
	case o.Kind == identity.OwnerList:
		forms := make([]string, len(o.Parts))
		for i, part := range o.Parts {
			forms[i] = sourceForm(part, jwt)
		}
		return string(o.Kind) + "(" + strings.Join(forms, ",") + ")"
	}
	return string(o.Kind)
}

// ownerSeen is the owner source a scope and kind took owners from, and
// the route that first did.
type ownerSeen struct{ ns, route string }

// Admit remembers p's owner sources, unless a route of p takes owners of
// one kind from another source than a policy admitted before did in the
// same scope (OwnerConflicts): it then returns the error naming them and
// remembers nothing.
func (l *OwnerLedger) Admit(p *Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.conflicts(p); err != nil {
		return err
	}
	l.add(p)
	return nil
}

func (l *OwnerLedger) add(p *Policy) {
	if l.seen == nil {
		l.seen = map[[2]string]ownerSeen{}
	}
	for _, r := range p.Routes() {
		k := [2]string{r.Scope, ownerForm(r)}
		if _, ok := l.seen[k]; !ok {
			l.seen[k] = ownerSeen{ownerNamespace(r), r.Name}
		}
	}
}

func (l *OwnerLedger) conflicts(p *Policy) error {
	var errs []error
	for _, r := range p.Routes() {
		prev, ok := l.seen[[2]string{r.Scope, ownerForm(r)}]
		if ns := ownerNamespace(r); ok && prev.ns != ns {
			errs = append(errs, fmt.Errorf("route %q takes owners from %s, but route %q kept records in scope %q with owners from %s: both produce owner values of one form, so a principal of the new source would be answered the records of another principal with the same value; give the route a scope of its own (its earlier records are then no longer found)",
				r.Name, ns, prev.route, r.Scope, prev.ns))
		}
	}
	return errors.Join(errs...)
}
