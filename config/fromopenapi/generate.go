package fromopenapi

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Options are init's flags.
type Options struct {
	// Upstream overrides the description's first server (--upstream).
	Upstream string
	// Store is the store driver written: memory (default), bolt, valkey
	// or postgres.
	Store string
	// Tombstones writes the proposed tombstone rules as settings instead
	// of comments (--tombstones).
	Tombstones bool
	// Source names the description in the generated header (its file
	// name, or "-").
	Source string
}

// Stores are the drivers --store takes.
var Stores = []string{"memory", "bolt", "valkey", "postgres"}

// Plan is the configuration Generate derived from a description, before
// Render writes it.
type Plan struct {
	Doc     *Document
	Options Options
	// Upstream is upstream.url; UpstreamNote says where it came from.
	Upstream, UpstreamNote string
	// Defaults holds the settings most routes share (written under
	// defaults:, which routes inherit).
	Defaults Settings
	// Routes are the enforced operations, one route each.
	Routes []Route
	// NotEnforced are PUT and DELETE operations that declare no key:
	// idempotent by method, listed in a comment.
	NotEnforced []Operation
	// Skipped are unsafe operations init could not express, each with why.
	Skipped []Skipped
	// Safe counts GET, HEAD, OPTIONS, TRACE and QUERY operations, which
	// are never enforced.
	Safe int
}

// Skipped is an operation left out, and why.
type Skipped struct {
	Op     Operation
	Reason string
}

// Route is one generated route.
type Route struct {
	Name    string
	Op      Operation
	Pattern string // ServeMux path pattern, e.g. /v1/orders/{id}
	Settings
	// Tombstone is the DELETE path that deletes what this route creates,
	// when it is one (a POST on the collection of that item path).
	Tombstone string
}

// Match is the route's ServeMux pattern with its method.
func (r Route) Match() string { return r.Op.Method + " " + r.Pattern }

// Settings are the per-route choices that defaults may carry.
type Settings struct {
	Owner     Owner
	Body      string // json or raw ("" leaves the default, raw)
	BodyNote  string
	Retention string // Go duration, "" for idemgate's default
	RetNote   string
}

// Owner is an owner setting and what it needs.
type Owner struct {
	Sources []string // owner sources, e.g. [authorization] or ["header:X-API-Key"]
	JWT     *JWT     // with a jwt source
	Note    string   // why, or what a human must decide (Review)
	Review  bool     // a human must choose or check it
}

// JWT is a jwt: section.
type JWT struct {
	Issuer, JWKSURL string
	IssuerGuessed   bool // the issuer is a description URL's origin
}

// key identifies an owner setting, to share it through defaults.
func (o Owner) key() string {
	k := strings.Join(o.Sources, ",")
	if o.JWT != nil {
		k += "|" + o.JWT.Issuer + "|" + o.JWT.JWKSURL
	}
	return k + "|" + o.Note
}

// placeholderJWKS is the jwks_url written when a description gives none:
// the .invalid top-level domain never resolves (RFC 6761), so validate
// warns and /readyz names it until an operator sets the real one.
const placeholderJWKS = "https://replace-me.invalid/.well-known/jwks.json"

// placeholderUpstream is upstream.url when the description has no
// absolute server URL and --upstream is not given.
const placeholderUpstream = "http://127.0.0.1:3000"

// Generate derives a Plan from doc.
func Generate(doc *Document, o Options) (*Plan, error) {
	if o.Store == "" {
		o.Store = "memory"
	}
	if !slices.Contains(Stores, o.Store) {
		return nil, fmt.Errorf("--store %q must be one of %s", o.Store, strings.Join(Stores, ", "))
	}
	p := &Plan{Doc: doc, Options: o}
	if err := p.upstream(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	names := map[string]bool{}
	creates := map[string]int{} // POST path -> index in Routes
	var deletes []Operation
	for _, op := range doc.Operations {
		switch op.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, "QUERY":
			p.Safe++
			continue
		case http.MethodPut, http.MethodDelete:
			if op.Method == http.MethodDelete {
				deletes = append(deletes, op)
			}
			if op.Key == nil {
				p.NotEnforced = append(p.NotEnforced, op)
				continue
			}
		case http.MethodPost, http.MethodPatch:
		default:
			p.Skipped = append(p.Skipped, Skipped{op, "method " + op.Method + " is not one init maps"})
			continue
		}
		pattern, err := Pattern(op.Path)
		if err != nil {
			p.Skipped = append(p.Skipped, Skipped{op, err.Error()})
			continue
		}
		if err := register(mux, op.Method+" "+pattern); err != nil {
			p.Skipped = append(p.Skipped, Skipped{op, err.Error()})
			continue
		}
		r := Route{Name: uniqueName(routeName(op), names), Op: op, Pattern: pattern}
		r.Owner = ownerOf(op)
		r.Body, r.BodyNote = bodyOf(op.MediaTypes)
		r.Retention, r.RetNote = retentionOf(op)
		if op.Method == http.MethodPost {
			creates[op.Path] = len(p.Routes)
		}
		p.Routes = append(p.Routes, r)
	}
	for _, d := range deletes {
		i := strings.LastIndexByte(d.Path, '/')
		if i <= 0 || !wildcardRE.MatchString(d.Path[i+1:]) {
			continue
		}
		if j, ok := creates[d.Path[:i]]; ok && p.Routes[j].Tombstone == "" {
			p.Routes[j].Tombstone = d.Path
		}
	}
	p.shareDefaults()
	return p, nil
}

// upstream picks upstream.url: --upstream, else the first absolute server
// URL (its path is the prefix the upstream serves the description's paths
// under: SetURL joins it), else a placeholder.
func (p *Plan) upstream() error {
	if p.Options.Upstream != "" {
		u, err := url.Parse(p.Options.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "h2c") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("--upstream %q is not an absolute http, https or h2c URL without a query or fragment", p.Options.Upstream)
		}
		p.Upstream, p.UpstreamNote = p.Options.Upstream, "--upstream"
		return nil
	}
	for i, s := range p.Doc.Servers {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(u.Host, "{}") {
			continue
		}
		u.RawQuery, u.Fragment, u.ForceQuery, u.RawFragment = "", "", false, ""
		p.Upstream = u.String()
		p.UpstreamNote = "servers[" + strconv.Itoa(i) + "]"
		if p.Doc.Spec != "" && strings.HasPrefix(p.Doc.Spec, "Swagger") {
			p.UpstreamNote = "host + basePath"
		}
		return nil
	}
	p.Upstream = placeholderUpstream
	p.UpstreamNote = "REVIEW: placeholder, the description names no absolute server URL"
	for _, s := range p.Doc.Servers {
		if u, err := url.Parse(placeholderUpstream + s); err == nil && strings.HasPrefix(s, "/") && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery {
			p.Upstream = strings.TrimSuffix(placeholderUpstream+s, "/")
			p.UpstreamNote += " (its server path " + s + " is kept)"
			break
		}
	}
	return nil
}

// register adds pattern to mux, turning ServeMux's panic on a conflict
// into an error.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pattern %q cannot be a route: %v", pattern, v)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

var (
	// fieldNameRE is an HTTP field name, a token (RFC 9110 section 5.1).
	fieldNameRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")
	wildcardRE  = regexp.MustCompile(`^\{[^{}]+\}$`)
	identRE     = regexp.MustCompile(`[^A-Za-z0-9_]`)
)

// Pattern maps an OpenAPI path template to a ServeMux path pattern: each
// {param} segment becomes a {wildcard} (renamed to a Go identifier, which
// ServeMux needs), and a trailing slash becomes {$} so the route matches
// that path alone, not its subtree. A template with a parameter inside a
// segment (/files/{name}.{ext}, /v1/{id}:cancel), an empty segment or no
// leading slash cannot be expressed: the error says which part.
func Pattern(tmpl string) (string, error) {
	if !strings.HasPrefix(tmpl, "/") {
		return "", fmt.Errorf("path template %q does not start with /", tmpl)
	}
	if tmpl == "/" {
		return "/{$}", nil
	}
	segs := strings.Split(tmpl[1:], "/")
	used := map[string]bool{}
	for i, s := range segs {
		last := i == len(segs)-1
		switch {
		case s == "" && last:
			segs[i] = "{$}"
		case s == "":
			return "", fmt.Errorf("path template %q has an empty segment, which a route cannot match as written", tmpl)
		case s == "{$}" || strings.HasPrefix(s, "{...") || strings.HasSuffix(s, "...}"):
			return "", fmt.Errorf("path template %q: segment %q reads as a ServeMux marker, not a parameter", tmpl, s)
		case wildcardRE.MatchString(s):
			name := identRE.ReplaceAllString(s[1:len(s)-1], "_")
			if name == "" || unicode.IsDigit(rune(name[0])) {
				name = "p" + name
			}
			for base, n := name, 2; used[name]; n++ {
				name = base + strconv.Itoa(n)
			}
			used[name] = true
			segs[i] = "{" + name + "}"
		case strings.ContainsAny(s, "{}"):
			return "", fmt.Errorf("path template %q: segment %q mixes a parameter with text, which ServeMux wildcards (whole segments) cannot express; widening it to a whole-segment wildcard would enforce other paths too", tmpl, s)
		}
	}
	return "/" + strings.Join(segs, "/"), nil
}

var nameRunRE = regexp.MustCompile(`[^a-z0-9]+`)

// routeName is the operationId in kebab case (createOrder, create_order
// and CreateOrder are create-order), else the method and path.
func routeName(op Operation) string {
	src := op.ID
	if src == "" {
		src = op.Method + " " + op.Path
	}
	var b strings.Builder
	rs := []rune(src)
	for i, c := range rs {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
			(i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	name := strings.Trim(nameRunRE.ReplaceAllString(b.String(), "-"), "-")
	if name == "" || name == "default" {
		name = "op-" + strings.ToLower(op.Method)
	}
	if len(name) > 100 {
		name = strings.TrimRight(name[:100], "-")
	}
	return name
}

func uniqueName(name string, used map[string]bool) string {
	for base, n := name, 2; used[name]; n++ {
		name = base + "-" + strconv.Itoa(n)
	}
	used[name] = true
	return name
}

// ownerOf maps the operation's security requirement to an owner: the
// first alternative init can express; an operation without one gets
// authorization marked for review (a request without Authorization is
// then refused 400 missing-owner, never keyed globally).
func ownerOf(op Operation) Owner {
	if op.Security == nil {
		return Owner{Sources: []string{"authorization"}, Review: true,
			Note: "REVIEW owner: the description declares no security; authorization is a placeholder (a request without that field is refused 400 missing-owner): choose header:NAME, jwt or client-cert"}
	}
	var chosen *Owner
	var others, why []string
	optional := false
	for _, alt := range op.Security {
		if len(alt) == 0 {
			optional = true
			continue
		}
		o, reason := alternative(alt, op.Schemes)
		switch {
		case reason != "":
			why = append(why, reason)
		case chosen == nil:
			chosen = &o
		case o.key() != chosen.key():
			others = append(others, strings.Join(alt, "+"))
		}
	}
	if chosen == nil {
		// An operation whose security is [] opts out of a requirement the
		// description sets elsewhere: say so, or the reader looks for a
		// security section that is there.
		note := "REVIEW owner: the description exempts this operation from security (security: [])"
		if len(why) > 0 {
			note = "REVIEW owner: " + strings.Join(why, "; ")
		} else if optional {
			note = "REVIEW owner: the description lets this operation be called without credentials"
		}
		return Owner{Sources: []string{"authorization"}, Review: true, Note: note + "; authorization is a placeholder (a request without that field is refused 400 missing-owner)"}
	}
	names := strings.Join(op.Security[slices.IndexFunc(op.Security, func(a []string) bool { return len(a) > 0 })], "+")
	chosen.Note = cmp.Or(chosen.Note, "security "+names)
	if len(others) > 0 {
		chosen.Review = true
		chosen.Note += "; REVIEW: the description also accepts " + strings.Join(others, ", ") + ", whose requests carry another credential and would be refused 400 missing-owner"
	}
	if optional {
		chosen.Review = true
		chosen.Note += "; REVIEW: credentials are optional in the description, and a request without them is refused 400 missing-owner"
	}
	return *chosen
}

// alternative maps one security requirement alternative (schemes that
// must all be present) to owner sources, or says why it cannot.
func alternative(alt []string, schemes map[string]Scheme) (Owner, string) {
	var o Owner
	add := func(src string) {
		if !slices.Contains(o.Sources, src) {
			o.Sources = append(o.Sources, src)
		}
	}
	for _, name := range alt {
		s, ok := schemes[name]
		if !ok {
			return o, "security scheme " + name + " is not defined"
		}
		switch s.Type {
		case "http":
			add("authorization")
		case "apiKey":
			if s.In == "header" && !fieldNameRE.MatchString(s.Name) {
				return o, "security scheme " + name + " names header " + strconv.Quote(s.Name) + ", which is not a valid field name"
			}
			if s.In != "header" || s.Name == "" {
				return o, "security scheme " + name + " is an apiKey in " + s.In + "; idemgate reads an owner from a header (header:NAME) or the Authorization field"
			}
			if strings.EqualFold(s.Name, "Authorization") {
				add("authorization")
			} else {
				add("header:" + s.Name)
			}
		case "oauth2", "openIdConnect":
			if o.JWT != nil {
				return o, "security requirement " + strings.Join(alt, "+") + " names two token schemes"
			}
			o.JWT = jwtOf(s)
			add("jwt")
		case "mutualTLS":
			return o, "security scheme " + name + " is mutualTLS: owner client-cert needs server.tls.client_auth and a client CA"
		default:
			return o, "security scheme " + name + " has type " + strconv.Quote(s.Type) + ", which init does not map"
		}
	}
	return o, ""
}

// jwtOf derives the jwt: section: the issuer from the OpenID Connect
// discovery URL (without /.well-known/openid-configuration) or from the
// origin of an OAuth2 flow's URL; the JWKS URL is a placeholder, since a
// description does not give one.
func jwtOf(s Scheme) *JWT {
	j := &JWT{JWKSURL: placeholderJWKS}
	if s.OpenIDConnectURL != "" {
		j.Issuer = strings.TrimSuffix(strings.TrimSuffix(s.OpenIDConnectURL, "/.well-known/openid-configuration"), "/")
		return j
	}
	for _, raw := range s.URLs {
		if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
			j.Issuer, j.IssuerGuessed = u.Scheme+"://"+u.Host, true
			return j
		}
	}
	j.Issuer, j.IssuerGuessed = "https://replace-me.invalid", true
	return j
}

// bodyOf maps request media types to fingerprint.body.
func bodyOf(types []string) (body, note string) {
	if len(types) == 0 {
		return "", ""
	}
	jsonAll, grpc := true, false
	for _, t := range types {
		mt := strings.ToLower(strings.TrimSpace(strings.Split(t, ";")[0]))
		if strings.HasPrefix(mt, "application/grpc") {
			grpc = true
		}
		if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			jsonAll = false
		}
	}
	switch {
	case grpc:
		return "raw", "gRPC: body: protobuf with fingerprint.descriptors fingerprints messages canonically (docs/grpc.md)"
	case jsonAll:
		return "json", ""
	}
	return "raw", "request body " + strings.Join(types, ", ")
}

var isoDurationRE = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$`)

// retentionOf reads a retention extension: a Go duration (24h), an ISO
// 8601 duration (P1D, PT24H) or a number of seconds.
func retentionOf(op Operation) (string, string) {
	if op.Retention == "" {
		return "", ""
	}
	v := strings.TrimSpace(op.Retention)
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n < 1<<33 {
		d = time.Duration(n) * time.Second
	} else if m := isoDurationRE.FindStringSubmatch(strings.ToUpper(v)); m != nil && v != "P" && !strings.HasSuffix(strings.ToUpper(v), "T") {
		for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
			if m[i+1] != "" {
				n, err := strconv.ParseInt(m[i+1], 10, 64)
				if err != nil || n > 1<<20 {
					return "", "REVIEW: " + op.RetentionFrom + " " + strconv.Quote(v) + " is out of range; idemgate's default applies"
				}
				d += time.Duration(n) * unit
			}
		}
	} else if pd, err := time.ParseDuration(v); err == nil {
		d = pd
	}
	if d < time.Millisecond {
		return "", "REVIEW: " + op.RetentionFrom + " " + strconv.Quote(v) + " is not a duration init reads; idemgate's default applies"
	}
	return formatDuration(d), "from " + op.RetentionFrom
}

// formatDuration writes d in the largest whole unit (24h, 90m, 30s).
func formatDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// shareDefaults moves the most common owner, body and retention into
// Defaults, so routes write only what differs.
func (p *Plan) shareDefaults() {
	owners := map[string]int{}
	bodies := map[string]int{}
	rets := map[string]int{}
	for _, r := range p.Routes {
		owners[r.Owner.key()]++
		bodies[r.Body+"|"+r.BodyNote]++
		rets[r.Retention+"|"+r.RetNote]++
	}
	// On a tie, an owner that needs no review goes into defaults, so that a
	// REVIEW note sits on the route it is about.
	ownerKey := mostBy(owners, func(k string) bool {
		i := slices.IndexFunc(p.Routes, func(r Route) bool { return r.Owner.key() == k })
		return !p.Routes[i].Owner.Review
	})
	bodyKey, retKey := most(bodies), most(rets)
	for _, r := range p.Routes {
		if r.Owner.key() == ownerKey {
			p.Defaults.Owner = r.Owner
			break
		}
	}
	for _, r := range p.Routes {
		if r.Body+"|"+r.BodyNote == bodyKey {
			p.Defaults.Body, p.Defaults.BodyNote = r.Body, r.BodyNote
			break
		}
	}
	for _, r := range p.Routes {
		if r.Retention+"|"+r.RetNote == retKey {
			p.Defaults.Retention, p.Defaults.RetNote = r.Retention, r.RetNote
			break
		}
	}
	if len(p.Routes) == 0 {
		p.Defaults.Owner = ownerOf(Operation{})
	}
}

// most returns the key with the highest count, the smallest key on a tie.
func most(counts map[string]int) string {
	return mostBy(counts, func(string) bool { return true })
}

// mostBy returns the key with the highest count; on a tie a key preferred
// says yes to, then the smallest key.
func mostBy(counts map[string]int, preferred func(string) bool) string {
	best, n, pref := "", -1, false
	for k, c := range counts {
		kp := preferred(k)
		if c > n || (c == n && (kp && !pref || kp == pref && k < best)) {
			best, n, pref = k, c, kp
		}
	}
	return best
}

// Enforced lists the operations the plan enforces as "METHOD PATTERN", in
// route order: what `idemgate policy` lists for the generated
// configuration.
func (p *Plan) Enforced() []string {
	out := make([]string, 0, len(p.Routes))
	for _, r := range p.Routes {
		out = append(out, r.Match())
	}
	return out
}

// Summary is the one-line account init prints on stderr.
func (p *Plan) Summary() string {
	var review []string
	for _, r := range p.Routes {
		if r.Owner.Review {
			review = append(review, r.Name)
		}
	}
	s := fmt.Sprintf("read %d operations: %d routes written, %d safe (GET, HEAD, ...) not enforced, %d PUT/DELETE without a declared key left to their method's idempotency, %d skipped",
		len(p.Doc.Operations), len(p.Routes), p.Safe, len(p.NotEnforced), len(p.Skipped))
	if n := len(review); n > 0 {
		noun := "routes whose owner needs"
		if n == 1 {
			noun = "route whose owner needs"
		}
		if n > 5 {
			review = append(review[:5], "...")
		}
		s += fmt.Sprintf(", %d %s review (%s)", n, noun, strings.Join(review, ", "))
	}
	return s
}
