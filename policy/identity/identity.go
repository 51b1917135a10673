package identity

import (
	"strings"

	"github.com/idemgate/idemgate/internal/httpsyntax"
	"github.com/idemgate/idemgate/store"
)

// The identity of a record (store.Identity: owner, scope, key) is derived
// here and nowhere else. The proxy's claim and replay cache, the resource
// index and tombstones, the layout 1 fallback and the admin API's lookups
// and purges all call these functions, so a record one of them writes is
// the record the others find. Before, each derived the scope its own way:
// with upstream.pass_host the admin API looked in the route's scope without
// the host (a record that existed answered 404 and could not be purged) and
// a DELETE tombstoned the scope without the host (the create's retry still
// replayed 201), and the default port made another scope; the e2e tests
// TestAdminPurgesPerHostRecord, TestTombstonesPerHost and
// TestDefaultPortIsOneScope pin the three.

// Scoped is what Scoping reads of a route; package policy's *Route is
// one.
type Scoped interface {
	// RecordScope is the route's own key scope (its `scope` setting,
	// "default" unless set): records are found by owner, scope and key,
	// never by the route's name or match.
	RecordScope() string
	// HostPattern reports whether the route's pattern names a host, which
	// keeps its records in a scope of their own already.
	HostPattern() bool
}

// Scoping is how the key scope of a request's record is derived beyond the
// route's own `scope`: the settings outside the policy that change it. The
// zero value is the default (upstream.pass_host off).
type Scoping struct {
	// PassHost is upstream.pass_host: the upstream gets each client's
	// Host and may serve each host as another tenant, while the
	// fingerprint does not cover the host, so the host joins the scope of
	// routes whose pattern names none (a host pattern already keeps its
	// records in a scope of its own, derivedScope). Sharing one scope
	// across hosts replayed tenant a's response to tenant b.
	PassHost bool
}

// Origin is where a request was sent: its Host field (or HTTP/2
// :authority; RFC 9110 section 7.2) as the client wrote it, and whether it
// came over TLS, which decides the scheme's default port (RFC 9110
// sections 4.2.1 and 4.2.2).
type Origin struct {
	Host  string
	HTTPS bool
}

// Identity returns the identity of the record of a request with owner and
// key (the stored forms: Route.OwnerOf, Route.KeyOf) that route governs,
// sent to at: (owner, Scope, key).
func (s Scoping) Identity(route Scoped, owner, key string, at Origin) store.Identity {
	return store.Identity{Owner: owner, Scope: s.Scope(route, at), Key: key}
}

// Resource returns the resource at path (cleaned, CleanPath) whose records
// of owner that route indexes (resource_from) a request sent to at
// tombstones: the index entry Identity's record is filed under, so a
// DELETE reaches exactly the records its creates wrote.
func (s Scoping) Resource(route Scoped, owner, path string, at Origin) store.Resource {
	return store.Resource{Owner: owner, Scope: s.Scope(route, at), Path: path}
}

// Scope returns the key scope of the records of a request that route
// governs, sent to at: the route's scope (Route.Scope), and with PassHost
// also "@" and the request's host in its canonical form (OriginHost) when
// the route's pattern names no host.
func (s Scoping) Scope(route Scoped, at Origin) string {
	if !s.HostScoped(route) {
		return route.RecordScope()
	}
	return route.RecordScope() + "@" + OriginHost(at)
}

// HostScoped reports whether the host a request was sent to is part of the
// scope of route's records, so a lookup of one of them (the admin API's)
// must name the host.
func (s Scoping) HostScoped(route Scoped) bool {
	return s.PassHost && !route.HostPattern()
}

// OriginHost returns the host of at as it enters a key scope: lowercased
// and without a trailing dot on the name (as routes compare it), and without the
// port when it is empty or the default port of at's scheme (80 for http,
// 443 for https). RFC 3986 section 6.2.3 and RFC 9110 section 4.2.3 make
// "t1.example", "T1.Example.", "t1.example:" and "t1.example:80" one
// origin over http, so they are one scope; "t1.example:443" over http and
// "t1.example:8080" are other origins and keep their port.
func OriginHost(at Origin) string {
	h := strings.ToLower(httpsyntax.Host(at.Host))
	i := strings.LastIndexByte(h, ':')
	if i < 0 || strings.Contains(h[i:], "]") {
		return h // no port ("[::1]" has colons of its own)
	}
	def := "80"
	if at.HTTPS {
		def = "443"
	}
	if port := h[i+1:]; port == "" || port == def {
		return h[:i]
	}
	return h
}

// Layout1 returns where a build before layout 2 kept the record of
// id for the route named routeName (scoped by that name; docs/protocol.md,
// "Layout versions"), and false when that is id itself. Only a record of
// layout 1 (store.Record.Layout1) found there is id's: a route name is
// also a legal scope, and another route's current record can lie there.
func Layout1(id store.Identity, routeName string) (store.Identity, bool) {
	if id.Scope == routeName {
		return id, false
	}
	return store.Identity{Owner: id.Owner, Scope: routeName, Key: id.Key}, true
}
