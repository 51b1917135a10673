package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
)

// builder turns a rawConfig into a Config. A value that does not parse is
// reported at its path and replaced by the inherited one, so that it causes
// no second error downstream.
type builder struct {
	errs   []error
	failed map[string]bool   // paths already reported
	set    []map[string]bool // per route: fields the route sets itself

	policyErrs []error        // from policy.New
	merged     []policy.Route // routes then defaults, when policy.New failed
}

func (b *builder) bad(path, format string, args ...any) {
	b.failed[path] = true
	b.errs = append(b.errs, &policy.FieldError{Path: path, Err: fmt.Errorf(format, args...)})
}

func (b *builder) str(dst *string, src *string) {
	if src != nil {
		*dst = *src
	}
}

// statuses sets *dst to the status classes and codes of v
// (policy.ParseStatus) when v is set and every entry parses; each bad one
// is reported under path.
func (b *builder) statuses(path string, dst *[]policy.StatusRange, v *[]string) {
	if v == nil {
		return
	}
	st := []policy.StatusRange{}
	ok := true
	for _, e := range *v {
		sr, err := policy.ParseStatus(e)
		if err != nil {
			b.bad(path, "%v", err)
			ok = false
			continue
		}
		st = append(st, sr)
	}
	if ok {
		*dst = st
	}
}

func (b *builder) duration(path string, dst *time.Duration, src *string) {
	if src == nil {
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(*src))
	if err != nil {
		b.bad(path, "%q is not a duration like 10s, 1m30s or 24h", *src)
		return
	}
	*dst = d
}

func (b *builder) size(path string, dst *int64, src *string) {
	if src == nil {
		return
	}
	n, err := ParseSize(*src)
	if err != nil {
		b.bad(path, "%v", err)
		return
	}
	*dst = n
}

func (b *builder) build(raw *rawConfig) *Config {
	c := Default()
	b.str(&c.Listen, raw.Listen)
	if raw.Upstream.URL != nil {
		u, err := url.Parse(strings.TrimSpace(*raw.Upstream.URL))
		if err != nil || !u.IsAbs() {
			shown := strconv.Quote(*raw.Upstream.URL)
			if strings.Contains(*raw.Upstream.URL, "@") {
				shown = "the value" // may carry a password
			}
			b.bad("upstream.url", "%s is not an absolute http or https URL", shown)
		} else {
			c.Upstream.URL = u
		}
	}
	b.duration("upstream.timeout", &c.Upstream.Timeout, raw.Upstream.Timeout)
	if v := raw.Upstream.PassHost; v != nil {
		c.Upstream.PassHost = *v
	}
	ut := raw.Upstream.TLS
	b.str(&c.Upstream.TLS.CAFile, ut.CAFile)
	b.str(&c.Upstream.TLS.ServerName, ut.ServerName)
	b.str(&c.Upstream.TLS.CertFile, ut.CertFile)
	b.str(&c.Upstream.TLS.KeyFile, ut.KeyFile)
	if v := ut.InsecureSkipVerify; v != nil {
		c.Upstream.TLS.InsecureSkipVerify = *v
	}
	b.str(&c.Admin.Listen, raw.Admin.Listen)
	b.str(&c.Admin.Token, raw.Admin.Token)
	b.str(&c.Store.Driver, raw.Store.Driver)
	if a := raw.Store.Valkey.Addrs; a != nil {
		c.Store.Valkey.Addrs = append([]string(nil), (*a)...)
	}
	b.str(&c.Store.Valkey.Username, raw.Store.Valkey.Username)
	b.str(&c.Store.Valkey.Password, raw.Store.Valkey.Password)
	if t := raw.Store.Valkey.TLS; t != nil {
		c.Store.Valkey.TLS = *t
	}
	b.str(&c.Store.Valkey.KeyPrefix, raw.Store.Valkey.KeyPrefix)
	b.str(&c.Store.Valkey.SentinelMaster, raw.Store.Valkey.SentinelMaster)
	if n := raw.Store.Valkey.Acks.Replicas; n != nil {
		c.Store.Valkey.Acks.Replicas = *n
	}
	if a := raw.Store.Valkey.Acks.AOFLocal; a != nil {
		c.Store.Valkey.Acks.AOFLocal = *a
	}
	b.duration("store.valkey.acks.timeout", &c.Store.Valkey.Acks.Timeout, raw.Store.Valkey.Acks.Timeout)
	b.size("store.valkey.cache_bytes", &c.Store.Valkey.CacheBytes, raw.Store.Valkey.CacheBytes)
	if l := raw.Store.Valkey.Layout; l != nil {
		c.Store.Valkey.Layout = *l
	}
	b.duration("store.valkey.max_flush_delay", &c.Store.Valkey.MaxFlushDelay, raw.Store.Valkey.MaxFlushDelay)
	if n := raw.Store.Valkey.Connections; n != nil {
		c.Store.Valkey.Connections = *n
	}
	b.str(&c.Store.Bolt.Path, raw.Store.Bolt.Path)
	b.str(&c.Store.Postgres.DSN, raw.Store.Postgres.DSN)
	b.str(&c.Store.Postgres.Table, raw.Store.Postgres.Table)
	if n := raw.Store.Postgres.MaxConns; n != nil {
		c.Store.Postgres.MaxConns = *n
	}
	if v := raw.Store.V1Lookup; v != nil {
		c.Store.V1Lookup = *v
	}
	b.str(&c.Log.Format, raw.Log.Format)
	b.str(&c.Log.Level, raw.Log.Level)
	if v := raw.Log.Access; v != nil {
		c.Log.Access = *v
	}
	if v := raw.Log.Query; v != nil {
		c.Log.Query = *v
	}
	s := raw.Server
	b.duration("server.read_header_timeout", &c.Server.ReadHeaderTimeout, s.ReadHeaderTimeout)
	b.duration("server.read_timeout", &c.Server.ReadTimeout, s.ReadTimeout)
	b.duration("server.write_timeout", &c.Server.WriteTimeout, s.WriteTimeout)
	b.duration("server.idle_timeout", &c.Server.IdleTimeout, s.IdleTimeout)
	b.duration("server.shutdown_timeout", &c.Server.ShutdownTimeout, s.ShutdownTimeout)
	if s.ShutdownTimeout == nil {
		// Unset: follows upstream.timeout, so the drain outlasts the
		// longest call in flight at SIGTERM.
		c.Server.ShutdownTimeout = c.Upstream.Timeout + ShutdownMargin
	}
	if s.MaxHeaderBytes != nil {
		n := int64(c.Server.MaxHeaderBytes)
		b.size("server.max_header_bytes", &n, s.MaxHeaderBytes)
		if n > int64(^uint32(0)>>1) {
			b.bad("server.max_header_bytes", "%d bytes is more than 2GiB", n)
		} else {
			c.Server.MaxHeaderBytes = int(n)
		}
	}
	if tp := s.TrustedProxies; tp != nil {
		c.Server.TrustedProxies = append([]string(nil), (*tp)...)
	}
	st := s.TLS
	b.str(&c.Server.TLS.CertFile, st.CertFile)
	b.str(&c.Server.TLS.KeyFile, st.KeyFile)
	b.str(&c.Server.TLS.MinVersion, st.MinVersion)
	b.str(&c.Server.TLS.ClientCAFile, st.ClientCAFile)
	b.str(&c.Server.TLS.ClientAuth, st.ClientAuth)
	if s.MaxWaiters != nil {
		c.Server.MaxWaiters = *s.MaxWaiters
	}
	if s.MaxStoreWaiting != nil {
		c.Server.MaxStoreWaiting = *s.MaxStoreWaiting
	} else {
		// Unset: follows the store section (driver, pool size), so a
		// larger pool admits more.
		c.Server.MaxStoreWaiting = DefaultMaxStoreWaiting(c.Store)
	}
	if s.H2C != nil {
		c.Server.H2C = *s.H2C
	}
	tr := raw.Tracing
	if tr.Enabled != nil {
		c.Tracing.Enabled = *tr.Enabled
	}
	b.str(&c.Tracing.Endpoint, tr.Endpoint)
	b.str(&c.Tracing.Protocol, tr.Protocol)
	if tr.Insecure != nil {
		c.Tracing.Insecure = *tr.Insecure
	}
	if tr.SampleRatio != nil {
		c.Tracing.SampleRatio = *tr.SampleRatio
	}
	b.str(&c.Tracing.ServiceName, tr.ServiceName)
	b.str(&c.Problems.DocsURL, raw.Problems.DocsURL)
	b.str(&c.Problems.TypeBase, raw.Problems.TypeBase)

	defaults := policy.DefaultRoute()
	b.apply(&defaults, &raw.Defaults, "defaults")
	top := &raw.Problems.rawProblems
	topFormat, topOK := b.problemFormat("problems", top, nil)
	defaults.Problems = topFormat
	routes := make([]policy.Route, len(raw.Routes))
	b.set = make([]map[string]bool, len(raw.Routes))
	for i := range raw.Routes {
		rr := &raw.Routes[i]
		path := fmt.Sprintf("routes[%d]", i)
		r := defaults
		r.Methods = append([]string(nil), defaults.Methods...)
		r.Fingerprint.Headers = append([]string(nil), defaults.Fingerprint.Headers...)
		r.Fingerprint.Exclude = append([]string(nil), defaults.Fingerprint.Exclude...)
		r.ReplayStatuses = append([]policy.StatusRange(nil), defaults.ReplayStatuses...)
		r.UnknownStatuses = append([]policy.StatusRange(nil), defaults.UnknownStatuses...)
		r.TombstoneMethods = append([]string(nil), defaults.TombstoneMethods...)
		r.Name = ""
		if rr.Name == nil {
			b.bad(path+".name", "is required")
		} else {
			r.Name = *rr.Name
		}
		if rr.Match != nil {
			r.Match = *rr.Match
			if pattern, ok, err := policy.GRPCMatch(r.Match); err != nil {
				b.bad(path+".match", "%v", err)
			} else if ok {
				r.Match = pattern
			}
		}
		r.Upstream = nil
		if rr.Upstream != nil {
			r.Upstream = b.routeUpstream(path+".upstream", *rr.Upstream, c.Upstream.URL)
		}
		b.set[i] = rr.rawSettings.setFields()
		b.apply(&r, &rr.rawSettings, path)
		if rr.Problems != nil && (topOK || rr.Problems.Template != nil) {
			r.Problems, _ = b.problemFormat(path+".problems", rr.Problems, top)
		}
		routes[i] = r
	}
	p, err := policy.New(defaults, routes)
	if err != nil {
		b.policyErrs = unjoin(err)
		b.merged = append([]policy.Route{}, routes...)
		b.merged = append(b.merged, defaults)
		c.Policy = nil
		return c
	}
	c.Policy = p
	return c
}

// problemFormat builds the problem.Format of s, its unset keys taken from
// inherit (the top-level section; nil for the top level itself), and
// reports its problems under path ("problems", "routes[i].problems"). It
// returns nil when no key is set (RFC 9457 answers), and false when a
// problem was reported.
func (b *builder) problemFormat(path string, s, inherit *rawProblems) (*problem.Format, bool) {
	var m rawProblems
	if inherit != nil {
		m = *inherit
	}
	if s.Template != nil {
		m.Template = s.Template
	}
	if s.ContentType != nil {
		m.ContentType = s.ContentType
	}
	if s.Headers != nil {
		m.Headers = s.Headers
	}
	if (m.Template == nil || *m.Template == "") && (m.ContentType == nil || *m.ContentType == "") && (m.Headers == nil || len(*m.Headers) == 0) {
		return nil, true // RFC 9457, on the path that allocates least
	}
	var tmpl *template.Template
	if m.Template != nil && *m.Template != "" {
		tpath := path + ".template"
		if s.Template == nil {
			tpath = "problems.template"
		}
		text, err := os.ReadFile(*m.Template)
		if err != nil {
			b.bad(tpath, "%v", err)
			return nil, false
		}
		if tmpl, err = problem.ParseTemplate(*m.Template, string(text)); err != nil {
			b.bad(tpath, "does not parse: %v", err)
			return nil, false
		}
	}
	var ct string
	if m.ContentType != nil {
		ct = *m.ContentType
	}
	var headers map[string]map[string]string
	if m.Headers != nil {
		headers = *m.Headers
	}
	f, err := problem.NewFormat(tmpl, ct, headers)
	if err != nil {
		for _, e := range unjoin(err) {
			var ke *problem.KeyError
			if errors.As(e, &ke) {
				b.bad(path+"."+ke.Key, "%v", ke.Err)
			} else {
				b.bad(path, "%v", e)
			}
		}
		return nil, false
	}
	return f, true
}

// routeUpstream parses a route's `upstream:`: an absolute http(s) URL with
// a host and no query or fragment, as upstream.url. One equal to upstream.url
// is the global upstream (nil), so spelling it out changes no scope.
func (b *builder) routeUpstream(path, raw string, global *url.URL) *url.URL {
	shown := strconv.Quote(raw)
	if strings.Contains(raw, "@") {
		shown = "the value" // may carry a password
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != policy.SchemeH2C):
		b.bad(path, "%s is not an absolute http, https or h2c URL", shown)
		return nil
	case u.Host == "":
		b.bad(path, "%s has no host", shown)
		return nil
	case u.RawQuery != "" || u.Fragment != "":
		b.bad(path, "%s must not carry a query or fragment", shown)
		return nil
	}
	if global != nil && u.String() == global.String() {
		return nil
	}
	return u
}

// apply overrides r with the settings that s sets; path is "defaults" or
// "routes[i]".
func (b *builder) apply(r *policy.Route, s *rawSettings, path string) {
	if s.Mode != nil {
		r.Mode = policy.Mode(*s.Mode)
	}
	b.str(&r.Scope, s.Scope)
	b.str(&r.Header, s.Header)
	if k := s.Key; k != nil {
		b.key(r, k, s.Header != nil, path)
	}
	if s.Methods != nil {
		r.Methods = append([]string(nil), (*s.Methods)...)
	}
	if s.Required != nil {
		r.Required = *s.Required
	}
	if s.Owner != nil {
		o, err := identity.ParseOwnerSources(*s.Owner)
		if err != nil {
			b.bad(path+".owner", "%v", err)
		} else {
			r.Owner = o
		}
	}
	if j := s.JWT; j != nil {
		r.JWT = mergeJWT(r.JWT, j)
	} else if r.JWT != nil && !r.Owner.Uses(identity.OwnerJWT) {
		// Inherited from defaults by a route that chose another owner.
		r.JWT = nil
	}
	if s.AllowGlobalKeys != nil {
		r.AllowGlobalKeys = *s.AllowGlobalKeys
	}
	if f := s.Fingerprint; f != nil {
		if f.Headers != nil {
			r.Fingerprint.Headers = append([]string(nil), (*f.Headers)...)
		}
		if f.Query != nil {
			r.Fingerprint.Query = *f.Query
		}
		if f.Body != nil {
			r.Fingerprint.Body = fingerprint.BodyMode(*f.Body)
		}
		if f.Exclude != nil {
			r.Fingerprint.Exclude = append([]string(nil), (*f.Exclude)...)
		}
		if f.Descriptors != nil {
			r.Fingerprint.Proto = nil
			if *f.Descriptors != "" {
				schema, err := fingerprint.LoadProtoSchema(*f.Descriptors)
				if err != nil {
					b.bad(path+".fingerprint.descriptors", "%v", err)
				} else {
					r.Fingerprint.Proto = schema
				}
			}
		}
		if m := f.MediaTypes; m != nil {
			switch *m {
			case fingerprint.MediaTypesExact:
				r.Fingerprint.NormalizeMediaTypes = false
			case fingerprint.MediaTypesNormalize:
				r.Fingerprint.NormalizeMediaTypes = true
			default:
				b.bad(path+".fingerprint.media_types", "%q must be %s or %s", *m, fingerprint.MediaTypesExact, fingerprint.MediaTypesNormalize)
			}
		}
	}
	b.duration(path+".lease", &r.Lease, s.Lease)
	b.duration(path+".retention", &r.Retention, s.Retention)
	if s.Concurrent != nil {
		r.Concurrent = policy.Concurrent(*s.Concurrent)
	}
	b.duration(path+".wait_timeout", &r.WaitTimeout, s.WaitTimeout)
	b.statuses(path+".replay_statuses", &r.ReplayStatuses, s.ReplayStatuses)
	b.statuses(path+".unknown_statuses", &r.UnknownStatuses, s.UnknownStatuses)
	if s.ReplayGRPCCodes != nil {
		codes := []int{}
		for _, v := range *s.ReplayGRPCCodes {
			c, err := policy.ParseGRPCCode(v)
			if err != nil {
				b.bad(path+".replay_grpc_codes", "%v", err)
				continue
			}
			codes = append(codes, c)
		}
		r.ReplayGRPCCodes = codes
	}
	b.size(path+".max_request_bytes", &r.MaxRequestBytes, s.MaxRequestBytes)
	b.size(path+".max_response_bytes", &r.MaxResponseBytes, s.MaxResponseBytes)
	if s.OnStoreError != nil {
		r.OnStoreError = policy.OnStoreError(*s.OnStoreError)
	}
	if s.OnAbandoned != nil {
		r.OnAbandoned = policy.OnAbandoned(*s.OnAbandoned)
	}
	if s.AdvertiseExpiry != nil {
		r.AdvertiseExpiry = *s.AdvertiseExpiry
	}
	if s.ResourceFrom != nil {
		r.ResourceFrom = strings.TrimSpace(*s.ResourceFrom)
	}
	if s.TombstoneMethods != nil {
		r.TombstoneMethods = append([]string(nil), (*s.TombstoneMethods)...)
	}
}

// key applies a `key:` section to r. Setting key.from starts a new source
// (an inherited pointer does not carry over to from: header); key.name is
// the key field with from: header, so it and `header:` must not disagree.
func (b *builder) key(r *policy.Route, k *rawKey, headerSet bool, path string) {
	if k.From != nil {
		r.Key = identity.KeySource{From: identity.KeyFrom(strings.TrimSpace(*k.From))}
	}
	if k.Pointer != nil {
		r.Key.Pointer = strings.TrimSpace(*k.Pointer)
	}
	if k.Name == nil {
		return
	}
	name := strings.TrimSpace(*k.Name)
	switch {
	case r.Key.FromBody():
		b.bad(path+".key.name", "applies only with key.from: header; a body key is named by key.pointer")
	case headerSet && !strings.EqualFold(name, r.Header):
		b.bad(path+".key.name", "%q and header %q both name the key field; set one of them", name, r.Header)
	default:
		r.Header = name
	}
}

// mergeJWT returns the `jwt:` settings of a route whose inherited settings
// are base (nil if none) and whose own section is j: every key j sets
// replaces the inherited one, and jwks_file and jwks_url replace each other,
// being one choice. Claims default to identity.DefaultJWTClaims.
func mergeJWT(base *identity.JWTSettings, j *rawJWT) *identity.JWTSettings {
	out := &identity.JWTSettings{Claims: identity.DefaultJWTClaims()}
	if base != nil {
		out.JWKSFile, out.JWKSURL = base.JWKSFile, base.JWKSURL
		out.Issuers = append([]string(nil), base.Issuers...)
		out.Audiences = append([]string(nil), base.Audiences...)
		out.Claims = append([]string(nil), base.Claims...)
	}
	if j.JWKSFile != nil || j.JWKSURL != nil {
		out.JWKSFile, out.JWKSURL = "", ""
		if j.JWKSFile != nil {
			out.JWKSFile = strings.TrimSpace(*j.JWKSFile)
		}
		if j.JWKSURL != nil {
			out.JWKSURL = strings.TrimSpace(*j.JWKSURL)
		}
	}
	if j.Issuers != nil {
		out.Issuers = append([]string{}, (*j.Issuers)...)
	}
	if j.Audiences != nil {
		out.Audiences = append([]string{}, (*j.Audiences)...)
	}
	if j.Claims != nil {
		out.Claims = append([]string{}, (*j.Claims)...)
	}
	return out
}

// dropInherited removes an error at routes[i].FIELD when route i does not
// set FIELD and defaults.FIELD has an error: the route only inherited the
// bad value, and one report at its source is clearer than one per route.
func (b *builder) dropInherited(errs []error) []error {
	inDefaults := map[string]bool{}
	for _, e := range errs {
		var fe *policy.FieldError
		if errors.As(e, &fe) {
			if f, ok := strings.CutPrefix(fe.Path, "defaults."); ok {
				inDefaults[f] = true
			}
		}
	}
	out := errs[:0:0]
	for _, e := range errs {
		var fe *policy.FieldError
		if errors.As(e, &fe) {
			var i int
			var field string
			if n, _ := fmt.Sscanf(fe.Path, "routes[%d].", &i); n == 1 {
				_, field, _ = strings.Cut(fe.Path, "].")
				if i >= 0 && i < len(b.set) && !b.set[i][field] && inDefaults[field] {
					continue
				}
			}
		}
		out = append(out, e)
	}
	return out
}
