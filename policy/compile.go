package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/httpsyntax"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// DefaultRouteName is the Name of the defaults route, which requests that
// match no route get.
const DefaultRouteName = "default"

// FieldError is one configuration problem: Path is the key path of the
// setting in the config file, e.g. "routes[1].lease" or "defaults.owner".
type FieldError struct {
	Path string
	Err  error
}

// Error returns "path: problem".
func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns the underlying problem.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(path, format string, args ...any) error {
	return &FieldError{Path: path, Err: fmt.Errorf(format, args...)}
}

// Policy is a compiled, immutable set of routes; safe for concurrent use.
// Build one with New; the zero Policy has no defaults route.
type Policy struct {
	routes   []*Route // file order
	defaults *Route
	mux      *http.ServeMux
	// enforced lists every method some route (defaults included) enforces;
	// rivals holds, per route and enforced method, what could make one of
	// its canonical requests vary; overrides, per route and strictness of
	// the request's method, what a _method member of its JSON body could
	// reach (see compileVariants). All are set by New, so Decide's common
	// case needs no extra match.
	enforced []string
	// indexes: some route sets resource_from (Indexes).
	indexes   bool
	rivals    map[*Route][]rival
	overrides map[*Route][EnforcedRequired + 1][]rival
	// matchers holds, per enforced method, the shapes of the declared
	// patterns that can match it (see shapeSet): where none reaches a
	// canonical path, every variant of it falls to the defaults route.
	matchers map[string]*shapeSet
	// exhaustive turns off Decide's shortcuts past its first match, so
	// tests can compare them with the full variant match.
	exhaustive bool
}

// routeHandler marks a ServeMux match as one of our routes; anything else
// the mux returns (not found, method not allowed, redirects) means defaults.
type routeHandler struct{ route *Route }

// ServeHTTP is never called: the mux is only asked which handler matches.
func (routeHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

var (
	routeNameRE = regexp.MustCompile(`^[a-z0-9-]+$`)
	scopeRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9.:-]{0,63}$`)
)

// New compiles a Policy from the defaults route and the routes in file
// order. Each route must already carry its effective settings (defaults
// merged in, as config does). New sets the defaults route's Name to
// "default" and Match to "", canonicalizes header names, lowercases, sorts
// and deduplicates fingerprint headers, and narrows a route's Methods to the
// method of its Match pattern (a GET pattern also matches HEAD).
//
// It returns every problem at once (errors.Join of *FieldError, with paths
// "defaults.FIELD" and "routes[i].FIELD" named as in the config file):
// invalid or duplicate route names, invalid or conflicting Match patterns
// (net/http ServeMux syntax; a conflict names both routes), a pattern method
// outside Methods, and field values out of range.
func New(defaults Route, routes []Route) (*Policy, error) {
	var errs []error
	p := &Policy{mux: http.NewServeMux()}

	d := cloneRoute(defaults)
	d.Name, d.Match = DefaultRouteName, ""
	errs = append(errs, normalize(d, "defaults")...)
	p.defaults = d

	seen := map[string]int{}
	var registered []int
	for i := range routes {
		r := cloneRoute(routes[i])
		path := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.Name == DefaultRouteName:
			errs = append(errs, fieldErr(path+".name", "%q is reserved for the defaults route", r.Name))
		case !routeNameRE.MatchString(r.Name):
			errs = append(errs, fieldErr(path+".name", "%q must match ^[a-z0-9-]+$", r.Name))
		default:
			if j, dup := seen[r.Name]; dup {
				errs = append(errs, fieldErr(path+".name", "%q is already the name of routes[%d]", r.Name, j))
			} else {
				seen[r.Name] = i
			}
		}
		errs = append(errs, normalize(r, path)...)
		p.routes = append(p.routes, r)

		if r.Match == "" {
			errs = append(errs, fieldErr(path+".match", "is required"))
			continue
		}
		if err := register(p.mux, r); err != nil {
			errs = append(errs, matchError(path, r, err, routes, registered, p.routes))
			continue
		}
		if err := checkPatternHost(r); err != nil {
			errs = append(errs, &FieldError{Path: path + ".match", Err: err})
			continue
		}
		registered = append(registered, i)
		if m := patternMethod(r.Match); m != "" {
			allowed := []string{m}
			if m == http.MethodGet {
				allowed = append(allowed, http.MethodHead)
			}
			r.Methods = slices.DeleteFunc(r.Methods, func(x string) bool { return !slices.Contains(allowed, x) })
			if len(r.Methods) == 0 {
				errs = append(errs, fieldErr(path+".match", "method %s is not among methods %v, so the route would enforce nothing; add it to methods", m, routes[i].Methods))
			}
		}
	}
	errs = append(errs, checkScopes(p.defaults, p.routes)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// A request no pattern matches costs ServeMux a walk of every method's
	// tree (to tell 404 from 405), a few allocations, and Decide asks
	// for many such lookups: a catch-all answers them in one. Every
	// pattern but one equivalent to "/" is more specific, so no match
	// changes; if a route is such a pattern, it is the catch-all.
	_ = registerFallback(p.mux)
	p.bindOwnerRecords()
	p.compileVariants()
	p.indexes = p.defaults.ResourceFrom != "" || slices.ContainsFunc(p.routes, func(r *Route) bool { return r.ResourceFrom != "" })
	return p, nil
}

// derivedScope is the scope of a route that sets none: its pattern's host
// (lowercased) for a host pattern, else its own upstream's host:port
// (lowercased, as "upstream:HOST:PORT"), else DefaultScope. The fingerprint
// covers neither the host nor the upstream, so routes of different hosts or
// upstreams must never share records: the same key, owner and request on
// two hosts (or sent to two services) would replay one's response on the
// other (found by adversarial testing; TestHostRoutesNeverShareRecords,
// TestPerRouteUpstream).
func derivedScope(match string, upstream *url.URL) string {
	if h := patternHost(match); h != "" {
		return h
	}
	if upstream != nil {
		return "upstream:" + strings.ToLower(upstream.Host)
	}
	return DefaultScope
}

// upstreamName names a route's upstream in errors and descriptions.
func upstreamName(u *url.URL) string {
	if u == nil {
		return "upstream.url"
	}
	return u.Redacted()
}

// patternHost returns the lowercased host of a ServeMux pattern
// "[METHOD ][HOST]/[PATH]", or "" when it has none.
func patternHost(pattern string) string {
	rest := pattern
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		rest = strings.TrimLeft(rest[i:], " \t")
	}
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return ""
	}
	return strings.ToLower(rest[:slash])
}

// checkPatternHost refuses a pattern whose host is a bare word: ServeMux reads
// "POST v1/orders" as host "v1" and path "/orders", a route that silently never
// matches, and almost always a forgotten leading slash
// (TestValidateRejectsBareWordHost). A host must hold a dot, a port or be an
// IP literal, or be localhost.
func checkPatternHost(r *Route) error {
	host := patternHost(r.Match)
	if host == "" || host == "localhost" || strings.ContainsAny(host, ".:[") {
		return nil
	}
	method := patternMethod(r.Match)
	suggest := "/" + strings.TrimLeft(r.Match[len(method):], " \t")
	if method != "" {
		suggest = method + " " + suggest
	}
	return fmt.Errorf("route %q: pattern %q reads as host %q and path %q, and no request carries a host without a dot: if %q is part of the path, write %q",
		r.Name, r.Match, host, patternPath(r.Match), host, suggest)
}

// ownerNamespace names the set of owner values a route's owner source can
// produce. Sources of different kinds never produce the same value (each
// kind has its own prefix: h:, sha256:, j:, cert:, or the empty global
// owner), but two sources of one kind can: header:X-User and
// header:X-Partner both store "h:42", and jwt owners made of claims that
// leave out "iss" collide across issuers.
func ownerNamespace(r *Route) string {
	switch r.Owner.Kind {
	case identity.OwnerHeader:
		return r.Owner.String()
	case identity.OwnerList:
		// Lists of other sources produce values of one form ("m:[...]"),
		// so only the same list (with the same jwt claims) may share.
		ns := "owner list " + r.Owner.String()
		if r.Owner.Uses(identity.OwnerJWT) {
			jwt := *r
			jwt.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
			ns += " with " + ownerNamespace(&jwt)
		}
		return ns
	case identity.OwnerJWT:
		if r.JWT == nil {
			return string(identity.OwnerJWT)
		}
		ns := string(identity.OwnerJWT) + " claims " + strings.Join(r.JWT.Claims, ",")
		if !slices.Contains(r.JWT.Claims, "iss") {
			iss := slices.Clone(r.JWT.Issuers)
			slices.Sort(iss)
			ns += " of issuers " + strings.Join(iss, ",")
		}
		return ns
	}
	return string(r.Owner.Kind)
}

// checkScopes enforces what makes sharing records safe: routes that keep
// records in one scope (store.Identity.Scope) must match the same host and
// send to the same upstream, and
// those whose owners are of one kind must take them from the same source,
// or one principal's stored response could answer another principal
// (promise 2) or another host's endpoint. Each problem names the later
// route and the earlier one it conflicts with.
func checkScopes(defaults *Route, routes []*Route) []error {
	type first struct {
		path, name, host string
		upstream         string
		owners           map[identity.OwnerKind]string // kind -> namespace
		ownerPath        map[identity.OwnerKind]string
	}
	show := func(h string) string {
		if h == "" {
			return "any host"
		}
		return "host " + h
	}
	byScope := map[string]*first{}
	var errs []error
	all := append([]*Route{defaults}, routes...)
	for i, r := range all {
		path := "defaults"
		if i > 0 {
			path = fmt.Sprintf("routes[%d]", i-1)
		}
		host, ns, up := patternHost(r.Match), ownerNamespace(r), upstreamName(r.Upstream)
		f := byScope[r.Scope]
		if f == nil {
			byScope[r.Scope] = &first{path: path, name: r.Name, host: host, upstream: up,
				owners: map[identity.OwnerKind]string{r.Owner.Kind: ns}, ownerPath: map[identity.OwnerKind]string{r.Owner.Kind: path}}
			continue
		}
		if host != f.host {
			suggest := host
			if suggest == "" {
				suggest = r.Name
			}
			errs = append(errs, fieldErr(path+".scope", "route %q matches %s but keeps its records in scope %q with %s (%s), which matches %s: the fingerprint does not cover the host, so one key would replay the other host's response; give it a scope of its own (e.g. scope: %s)",
				r.Name, show(host), r.Scope, f.path, f.name, show(f.host), suggest))
			continue
		}
		if up != f.upstream {
			// One key sent to two services would replay the
			// first service's response for the second.
			errs = append(errs, fieldErr(path+".scope", "route %q sends requests to %s but keeps its records in scope %q with %s (%s), which sends them to %s: the fingerprint does not cover the upstream, so one key would replay the other service's response; give it a scope of its own (e.g. scope: %s)",
				r.Name, up, r.Scope, f.path, f.name, f.upstream, r.Name))
			continue
		}
		if prev, ok := f.owners[r.Owner.Kind]; !ok {
			f.owners[r.Owner.Kind], f.ownerPath[r.Owner.Kind] = ns, path
		} else if prev != ns {
			errs = append(errs, fieldErr(path+".owner", "route %q takes owners from %s but shares scope %q with %s, which takes them from %s: both produce owner values of one form, so two principals could share an owner; give one of them a scope of its own",
				r.Name, ns, r.Scope, f.ownerPath[r.Owner.Kind], prev))
		}
	}
	return errs
}

// lowerPatternHost lowercases the host of a ServeMux pattern
// "[METHOD ][HOST]/[PATH]", since Match compares it with a lowercased
// request host.
func lowerPatternHost(pattern string) string {
	rest := pattern
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		rest = strings.TrimLeft(rest[i:], " \t")
	}
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return pattern
	}
	start := len(pattern) - len(rest)
	return pattern[:start] + strings.ToLower(rest[:slash]) + rest[slash:]
}

// HostPattern reports whether the route's pattern names a host.
func (r *Route) HostPattern() bool { return patternHost(r.Match) != "" }

// matchError explains why r's pattern did not register: either it is
// invalid alone, or it conflicts with an earlier route, which it names.
func matchError(path string, r *Route, err error, raw []Route, registered []int, compiled []*Route) error {
	if alone := register(http.NewServeMux(), r); alone != nil {
		return fieldErr(path+".match", "invalid pattern %q: %v", r.Match, stripPanicPrefix(alone))
	}
	for _, j := range registered {
		m := http.NewServeMux()
		if register(m, compiled[j]) == nil && register(m, r) != nil {
			return fieldErr(path+".match", "pattern %q conflicts with routes[%d] (%s) pattern %q: both match some requests and neither is more specific", r.Match, j, raw[j].Name, raw[j].Match)
		}
	}
	return fieldErr(path+".match", "pattern %q: %v", r.Match, err)
}

func stripPanicPrefix(err error) string {
	s := err.Error()
	if _, after, ok := strings.Cut(s, ": "); ok && strings.HasPrefix(s, "parsing ") {
		return after
	}
	return s
}

// patternMethod returns the method of a ServeMux pattern
// "[METHOD ][HOST]/[PATH]", or "".
func patternMethod(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return pattern[:i]
	}
	return ""
}

func cloneRoute(r Route) *Route {
	r.Methods = slices.Clone(r.Methods)
	r.Fingerprint.Headers = slices.Clone(r.Fingerprint.Headers)
	r.Fingerprint.Exclude = slices.Clone(r.Fingerprint.Exclude)
	r.ReplayStatuses = slices.Clone(r.ReplayStatuses)
	r.UnknownStatuses = slices.Clone(r.UnknownStatuses)
	r.ReplayGRPCCodes = slices.Clone(r.ReplayGRPCCodes)
	r.TombstoneMethods = slices.Clone(r.TombstoneMethods)
	r.JWT = r.JWT.Clone()
	r.jwt = nil
	r.ownerRecord = nil
	return &r
}

// maxStoredResponseBytes bounds max_response_bytes, in bytes: half of
// Valkey's default proto-max-bulk-len, leaving room for the headers that
// travel with the body in the same Complete call.
const maxStoredResponseBytes = 256 << 20

// normalize canonicalizes r in place and returns its out-of-range fields.
func normalize(r *Route, path string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldErr(path+"."+field, format, args...))
	}
	if r.Mode == "" {
		r.Mode = ModeEnforce
	}
	if r.Mode != ModeEnforce && r.Mode != ModePassthrough {
		bad("mode", "%q must be enforce or passthrough", r.Mode)
	}
	if !httpsyntax.IsToken(r.Header) {
		bad("header", "%q is not a valid field name", r.Header)
	} else {
		if !strings.EqualFold(r.HeaderName, r.Header) {
			r.HeaderName = r.Header // the spelling written; kept when compiled again
		}
		r.Header = textproto.CanonicalMIMEHeaderKey(r.Header)
	}
	errs = append(errs, checkKeySource(&r.Key, path+".key")...)
	if len(r.Methods) == 0 {
		bad("methods", "must list at least one method")
	}
	var methods []string
	for _, m := range r.Methods {
		if !httpsyntax.IsToken(m) {
			bad("methods", "%q is not a valid method token", m)
		} else if m != strings.ToUpper(m) {
			// Methods are case-sensitive (RFC 9110 section 9.1): "post"
			// would silently never match a POST request.
			bad("methods", "%q must be upper case, e.g. %s", m, strings.ToUpper(m))
		} else if !slices.Contains(methods, m) {
			methods = append(methods, m)
		}
	}
	r.Methods = methods
	switch r.ResourceFrom {
	case "", ResourceFromLocation:
	default:
		bad("resource_from", "%q must be %s (or unset)", r.ResourceFrom, ResourceFromLocation)
	}
	var tombstoning []string
	for _, m := range r.TombstoneMethods {
		if !httpsyntax.IsToken(m) || m != strings.ToUpper(m) {
			bad("tombstone_methods", "%q is not an upper-case method token, e.g. DELETE", m)
		} else if !slices.Contains(tombstoning, m) {
			tombstoning = append(tombstoning, m)
		}
	}
	r.TombstoneMethods = tombstoning
	if r.ResourceFrom != "" && len(r.TombstoneMethods) == 0 {
		bad("tombstone_methods", "must list at least one method when resource_from is set")
	}
	switch r.Owner.Kind {
	case identity.OwnerHeader:
		if o, err := identity.ParseOwnerSource(r.Owner.String()); err != nil {
			bad("owner", "%v", err)
		} else {
			r.Owner = o
		}
	case identity.OwnerAuthorization, identity.OwnerClientCert:
	case identity.OwnerList:
		names := make([]string, len(r.Owner.Parts))
		for i, p := range r.Owner.Parts {
			names[i] = p.String()
		}
		if o, err := identity.ParseOwnerSources(names); err != nil {
			bad("owner", "%v", err)
		} else if o.Kind != identity.OwnerList {
			bad("owner", "a list of one source is that source; write owner: %s", o)
		} else {
			r.Owner = o
		}
		if r.Owner.Uses(identity.OwnerJWT) {
			if r.JWT == nil {
				bad("jwt", "is required with a jwt owner source (jwks_file or jwks_url, and issuers)")
			} else {
				errs = append(errs, checkJWT(r.JWT, path)...)
			}
		}
	case identity.OwnerJWT:
		if r.JWT == nil {
			bad("jwt", "is required with owner: jwt (jwks_file or jwks_url, and issuers)")
		} else {
			errs = append(errs, checkJWT(r.JWT, path)...)
		}
	case identity.OwnerNone:
		if !r.AllowGlobalKeys {
			bad("owner", "none shares keys between all clients and needs allow_global_keys: true")
		}
	default:
		bad("owner", "unknown owner source %q", r.Owner.Kind)
	}
	if r.JWT != nil && !r.Owner.Uses(identity.OwnerJWT) {
		bad("jwt", "is set but owner is %q: the jwt: section applies only with owner: jwt", r.Owner)
	}
	var fh []string
	for _, h := range r.Fingerprint.Headers {
		if !httpsyntax.IsToken(h) {
			bad("fingerprint.headers", "%q is not a valid field name", h)
			continue
		}
		if strings.EqualFold(h, "Accept-Encoding") {
			// A retry from a client with other codecs is the same
			// operation; the proxy decodes a stored coding the retry does
			// not accept instead (fitCoding in proxy).
			bad("fingerprint.headers", "%q must not be fingerprinted: a retry from a client with other codecs would get 422; replays are decoded for clients that do not accept the stored coding", h)
			continue
		}
		if h = strings.ToLower(h); !slices.Contains(fh, h) {
			fh = append(fh, h)
		}
	}
	slices.Sort(fh)
	r.Fingerprint.Headers = fh
	switch r.Fingerprint.Body {
	case fingerprint.BodyRaw, fingerprint.BodyJSON, fingerprint.BodyIgnore, fingerprint.BodyProtobuf:
	default:
		bad("fingerprint.body", "%q must be raw, json, protobuf or ignore", r.Fingerprint.Body)
	}
	checkProtobuf(r, bad)
	ex, exErrs := fingerprint.NormalizeExclude(r.Fingerprint.Exclude)
	for _, err := range exErrs {
		bad("fingerprint.exclude", "%v", err)
	}
	r.Fingerprint.Exclude = ex
	if len(r.Fingerprint.Exclude) > 0 && r.Fingerprint.Body != fingerprint.BodyJSON && r.Fingerprint.Body != fingerprint.BodyProtobuf {
		bad("fingerprint.exclude", "removes members of a JSON body and needs fingerprint.body: json (it is %q)", r.Fingerprint.Body)
	}
	r.recipe = r.Fingerprint.Recipe()
	if len(r.recipe) > store.MaxRecipeBytes { // every store refuses a longer one, so the route could never claim a key
		bad("fingerprint.headers", "%d headers and %d exclusions make a fingerprint recipe of %d bytes; the stores keep at most %d (store.MaxRecipeBytes)", len(r.Fingerprint.Headers), len(r.Fingerprint.Exclude), len(r.recipe), store.MaxRecipeBytes)
	}
	if r.Scope == "" {
		r.Scope = derivedScope(r.Match, r.Upstream)
		if !scopeRE.MatchString(r.Scope) {
			bad("scope", "%q, derived from the route's host or upstream, is not a valid scope: set scope (^[a-z0-9][a-z0-9.:-]{0,63}$)", r.Scope)
		}
	} else if !scopeRE.MatchString(r.Scope) {
		bad("scope", "%q must match ^[a-z0-9][a-z0-9.:-]{0,63}$", r.Scope)
	}
	// The stores keep leases and retentions in whole milliseconds: a shorter
	// lease fails every Claim, and a shorter retention would become 0,
	// which keeps records forever.
	if r.Lease <= 0 {
		bad("lease", "%v must be > 0", r.Lease)
	} else if r.Lease < time.Millisecond {
		bad("lease", "%v must be at least 1ms, the store's resolution", r.Lease)
	}
	if r.Retention < 0 {
		bad("retention", "%v must be >= 0 (0 keeps records forever)", r.Retention)
	} else if r.Retention > 0 && r.Retention < time.Millisecond {
		bad("retention", "%v must be 0 (forever) or at least 1ms, the store's resolution", r.Retention)
	}
	if r.Concurrent != ConcurrentWait && r.Concurrent != ConcurrentConflict {
		bad("concurrent", "%q must be wait or conflict", r.Concurrent)
	}
	if r.WaitTimeout <= 0 {
		bad("wait_timeout", "%v must be > 0", r.WaitTimeout)
	}
	if len(r.ReplayStatuses) == 0 {
		bad("replay_statuses", "must list at least one status class or code")
	}
	for _, s := range r.ReplayStatuses {
		if s.Min < 100 || s.Max > 599 || s.Min > s.Max {
			bad("replay_statuses", "range %d-%d is not within 100-599", s.Min, s.Max)
		} else if s.Min < 200 {
			// RFC 9110 section 15.2: a 1xx is never the final response. The
			// only one a transport returns is 101, whose body is another
			// protocol's stream, nothing a replay can repeat.
			bad("replay_statuses", "%s: informational (1xx) responses are not final and cannot be replayed", s)
		}
	}
	for _, s := range r.UnknownStatuses {
		switch {
		case s.Min < 100 || s.Max > 599 || s.Min > s.Max:
			bad("unknown_statuses", "range %d-%d is not within 100-599", s.Min, s.Max)
		case s.Min < 200:
			bad("unknown_statuses", "%s: informational (1xx) responses are not final", s)
		default:
			for _, rs := range r.ReplayStatuses {
				if s.Min <= rs.Max && rs.Min <= s.Max {
					bad("unknown_statuses", "%s is also in replay_statuses (%s): an answer is either stored or of unknown outcome", s, rs)
				}
			}
		}
	}
	checkGRPCCodes(r, bad)
	if r.MaxRequestBytes <= 0 {
		bad("max_request_bytes", "%d must be > 0", r.MaxRequestBytes)
	}
	if r.MaxResponseBytes <= 0 {
		bad("max_response_bytes", "%d must be > 0", r.MaxResponseBytes)
	} else if r.MaxResponseBytes > maxStoredResponseBytes {
		bad("max_response_bytes", "%d must be at most %d (256MiB): a response is stored as one value and Valkey refuses values over proto-max-bulk-len (512MB by default), so a larger one could not be recorded and would run again on a retry after its lease", r.MaxResponseBytes, maxStoredResponseBytes)
	}
	if r.OnStoreError != FailClosed && r.OnStoreError != FailOpen {
		bad("on_store_error", "%q must be fail_closed or fail_open", r.OnStoreError)
	}
	if r.OnAbandoned != AbandonedTakeover && r.OnAbandoned != AbandonedReject {
		bad("on_abandoned", "%q must be takeover or reject", r.OnAbandoned)
	}
	return errs
}

// Match returns the route for req by net/http ServeMux precedence (most
// specific pattern wins), or the defaults route (Name "default") when no
// route matches. Never nil.
//
// The path is matched after ServeMux's cleaning ("/a//b/../c" as "/a/c"),
// since that is the resource an upstream sees. A request that ServeMux would
// only redirect to a subtree ("/uploads" when "/uploads/" is a pattern)
// matches no route, even when a shorter subtree such as "/" covers it.
func (p *Policy) Match(req *http.Request) *Route {
	if req == nil || req.URL == nil {
		return p.defaults
	}
	rt, _ := p.match(req, req.Method)
	return rt
}

// match is Match with another method, and reports whether req's path is
// canonical (isCanonicalPath; always true for CONNECT, which has none).
func (p *Policy) match(req *http.Request, method string) (*Route, bool) {
	if req.Method == http.MethodConnect {
		if len(p.routes) == 0 {
			return p.defaults, true
		}
		lookup := req
		if host := httpsyntax.Host(req.Host); host != req.Host || method != req.Method {
			lookup = &http.Request{Method: method, Host: host, Header: req.Header, URL: req.URL}
		}
		return p.lookup(lookup), true
	}
	esc := req.URL.EscapedPath()
	canonical := isCanonicalPath(req.URL)
	if len(p.routes) == 0 {
		return p.defaults, canonical
	}
	lookup := req
	if !canonical && !isClean(esc) {
		clean := CleanPath(esc)
		unesc, err := url.PathUnescape(clean)
		if err != nil {
			return p.defaults, false
		}
		lookup = &http.Request{Method: method, Host: req.Host, Header: req.Header,
			URL: &url.URL{Path: unesc, RawPath: clean}}
	}
	if host := httpsyntax.Host(req.Host); host != req.Host || method != req.Method {
		if lookup == req {
			lookup = &http.Request{Method: method, Header: req.Header, URL: req.URL}
		}
		lookup.Host = host
	}
	return p.lookup(lookup), canonical
}

// Routes returns every route in file order, then the defaults route. The
// routes are shared: callers must not modify them.
func (p *Policy) Routes() []*Route {
	out := make([]*Route, 0, len(p.routes)+1)
	out = append(out, p.routes...)
	return append(out, p.defaults)
}

// Defaults returns the defaults route (Name "default").
func (p *Policy) Defaults() *Route { return p.defaults }

// Enforces reports whether requests with this method are enforced on r (mode
// enforce and method listed).
func (r *Route) Enforces(method string) bool {
	return r.Mode == ModeEnforce && slices.Contains(r.Methods, method)
}

// DefaultRoute returns the built-in defaults route, which a config file's
// `defaults:` section overrides: key field Idempotency-Key on POST and
// PATCH, optional, owner from the Authorization header, fingerprint over
// Content-Type, the query and the raw body, a 10s lease, 24h retention,
// wait up to 10s for a running twin, replay 2xx, 1 MiB request and response
// limits, fail closed, and answer a retry of an abandoned call
// outcome-unknown (on_abandoned: reject; docs/durability.md, "Proxy
// crashes").
func DefaultRoute() Route {
	return Route{
		Name:             DefaultRouteName,
		Mode:             ModeEnforce,
		Header:           "Idempotency-Key",
		Methods:          []string{http.MethodPost, http.MethodPatch},
		Owner:            identity.OwnerSource{Kind: identity.OwnerAuthorization},
		Fingerprint:      fingerprint.Spec{Headers: []string{"content-type"}, Query: true, Body: fingerprint.BodyRaw},
		Lease:            10 * time.Second,
		Retention:        24 * time.Hour,
		Concurrent:       ConcurrentWait,
		WaitTimeout:      10 * time.Second,
		ReplayStatuses:   []StatusRange{{Min: 200, Max: 299}},
		MaxRequestBytes:  1 << 20,
		MaxResponseBytes: 1 << 20,
		OnStoreError:     FailClosed,
		OnAbandoned:      AbandonedReject,
		TombstoneMethods: []string{http.MethodDelete},
	}
}
