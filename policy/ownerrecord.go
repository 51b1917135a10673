package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// OwnerRecordOwner is the owner of every owner record (OwnerRecord). Every
// owner a request can have is of one kind's stored form, and each of
// those starts with its kind's prefix ("h:", "sha256:", "cert:",
// "certder:", "j:", "m:") or is "" (owner: none); "idemgate:" starts none
// of them, so no request's identity is ever an owner record's, whatever
// its key, and no record of a request is ever read as one. A new owner
// kind must keep a prefix other than "idemgate:".
const OwnerRecordOwner = "idemgate:owner-ledger"

// OwnerRecordRecipe starts the recipe of every owner record; the owner
// source it records follows it (cut to fit store.MaxRecipeBytes).
const OwnerRecordRecipe = "owner-ledger/1 "

// ownerRecordFingerprint prefixes the hex SHA-256 of the owner source
// that is an owner record's fingerprint.
const ownerRecordFingerprint = "owner-source:"

// OwnerRecord is the record, kept in the store, of the owner source the
// routes of one scope and owner form (ownerForm) take their owners from.
// The in-memory OwnerLedger refuses a reload that changes that source; a
// restart with the changed configuration, or a second instance started
// with it beside the first on the same store, has no memory of the first,
// and header:X-Partner 42 would be answered header:X-User 42's records
// (both "h:42"). The record makes the first source the store's: an engine
// claims it before the first keyed request of the scope under a policy,
// and a record of another source refuses the scope (proxy: owner-source-
// conflict) until an operator deletes it on purpose.
//
// A policy holds one per scope and form its routes keep records under,
// shared by those routes; routes whose form admits one source only
// (authorization, client-cert, none) need none, as no other source can
// produce their values. It is safe for concurrent use.
type OwnerRecord struct {
	// Identity is where the record lies: OwnerRecordOwner, the routes'
	// scope (never joined by a host: the host-scoped records of every host
	// share the source) and the owner form as key.
	Identity store.Identity
	// Fingerprint is derived from Source: equal sources, equal
	// fingerprints, in the form the stores take (at most
	// store.MaxFingerprintBytes).
	Fingerprint string
	// Recipe is OwnerRecordRecipe and Source, which the record keeps, so
	// a conflict can name the source recorded.
	Recipe string
	// Source names the owner source (ownerNamespace), as errors show it.
	Source string
	// Route is the name of the first route of the policy with it.
	Route string

	// passed lists the checkers (proxy.Proxy) that found the store's
	// record to be this one's, or wrote it: each checks once per policy,
	// then pays one atomic load per request.
	passed atomic.Pointer[[]any]
}

// Response is what the record stores on completion: the owner source, in
// a body no build replays (no request reaches the identity).
func (o *OwnerRecord) Response() store.Response {
	return store.Response{
		Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:   []byte(o.Source + "\n"),
	}
}

// RecordedSource returns the owner source a record with recipe names,
// or recipe itself when it is not an owner record's.
func RecordedSource(recipe string) string {
	if s, ok := strings.CutPrefix(recipe, OwnerRecordRecipe); ok {
		return s
	}
	return recipe
}

// Passed reports whether by has checked the record under this policy.
func (o *OwnerRecord) Passed(by any) bool {
	l := o.passed.Load()
	return l != nil && slices.Contains(*l, by)
}

// Pass remembers that by has checked the record under this policy.
func (o *OwnerRecord) Pass(by any) {
	for {
		old := o.passed.Load()
		var next []any
		if old != nil {
			if slices.Contains(*old, by) {
				return
			}
			next = append(next, *old...)
		}
		next = append(next, by)
		if o.passed.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Forget undoes Pass(by): by checks the record again on its next request
// (the store may have lost it: proxy.Proxy.NoteStoreFailure).
func (o *OwnerRecord) Forget(by any) {
	for {
		old := o.passed.Load()
		if old == nil || !slices.Contains(*old, by) {
			return
		}
		next := slices.DeleteFunc(slices.Clone(*old), func(b any) bool { return b == by })
		if o.passed.CompareAndSwap(old, &next) {
			return
		}
	}
}

// OwnerRecord returns the owner record the request of r must find in the
// store before it is claimed, nil when r's owners need none.
func (r *Route) OwnerRecord() *OwnerRecord { return r.ownerRecord }

// bindOwnerRecords gives each route of p the owner record of its scope
// and owner form, one per pair, shared.
func (p *Policy) bindOwnerRecords() {
	made := map[[2]string]*OwnerRecord{}
	for _, r := range p.Routes() {
		ns := ownerNamespace(r)
		if r.Owner.Kind == identity.OwnerNone || ns == string(r.Owner.Kind) {
			// One source of the form: nothing to tell apart.
			continue
		}
		k := [2]string{r.Scope, ownerForm(r)}
		o := made[k]
		if o == nil {
			sum := sha256.Sum256([]byte(ns))
			recipe := OwnerRecordRecipe + ns
			if len(recipe) > store.MaxRecipeBytes {
				recipe = recipe[:store.MaxRecipeBytes]
			}
			o = &OwnerRecord{
				Identity:    store.Identity{Owner: OwnerRecordOwner, Scope: r.Scope, Key: k[1]},
				Fingerprint: ownerRecordFingerprint + hex.EncodeToString(sum[:]),
				Recipe:      recipe,
				Source:      ns,
				Route:       r.Name,
			}
			made[k] = o
		}
		r.ownerRecord = o
	}
}
