package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/idemgate/idemgate/policy"
)

// EnvPrefix starts every environment override: the key path upper-cased
// with "." as "_", e.g. IDEMGATE_STORE_VALKEY_PASSWORD for
// store.valkey.password.
const EnvPrefix = "IDEMGATE_"

// envKeys are the keys that environment variables may override; policy
// settings (defaults, routes) come from the file only.
var envKeys = []string{
	"listen",
	"upstream.url", "upstream.timeout",
	"admin.listen", "admin.token",
	"store.driver",
	"store.valkey.addrs", "store.valkey.username", "store.valkey.password",
	"store.valkey.tls", "store.valkey.key_prefix", "store.valkey.sentinel_master",
	"store.valkey.acks.replicas", "store.valkey.acks.aof_local", "store.valkey.acks.timeout",
	"store.bolt.path", "store.v1_lookup",
	"store.postgres.dsn", "store.postgres.table", "store.postgres.max_conns",
	"log.format", "log.level",
	"server.read_header_timeout", "server.read_timeout", "server.write_timeout",
	"server.idle_timeout", "server.shutdown_timeout", "server.max_header_bytes",
	"tracing.enabled", "tracing.endpoint", "tracing.protocol", "tracing.insecure",
	"tracing.sample_ratio", "tracing.service_name",
}

// EnvName returns the environment variable that overrides key, e.g.
// "IDEMGATE_ADMIN_TOKEN" for "admin.token".
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Load reads the YAML file at path (path "" means the built-in defaults
// only), applies environment overrides from environ (entries "NAME=value",
// as os.Environ returns; see EnvPrefix; store.valkey.addrs takes a
// comma-separated list; variables that name no key are ignored), then the
// overrides given with WithOverrides (the command-line flags), compiles the
// policy and validates the result. A key set in several places takes its
// value from the override, else the environment, else the file, else the
// built-in default.
//
// It returns every problem at once: errors.Join of *policy.FieldError, each
// naming the key path (e.g. "routes[1].lease"), and the decoder's errors
// for unknown keys and mistyped values, which name their key paths too. An
// unreadable file or invalid YAML is a single error. With path "" a missing
// upstream.url is not an error, since the caller is expected to set
// Upstream.URL (e.g. from a flag) and call Validate.
func Load(path string, environ []string, opts ...LoadOption) (*Config, error) {
	o := newLoadOptions(opts)
	if path == "" {
		return load(nil, false, environ, o)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := load(data, true, environ, o)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse is Load for YAML already in memory: data is the file's bytes.
func Parse(data []byte, environ []string, opts ...LoadOption) (*Config, error) {
	return load(data, true, environ, newLoadOptions(opts))
}

// LoadOption changes what Load and Parse merge into the configuration.
type LoadOption func(*loadOptions)

type loadOptions struct {
	overrides map[string]string
}

func newLoadOptions(opts []LoadOption) loadOptions {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithOverrides sets keys over both the file and the environment: the
// command-line flags of idemgate serve. overrides maps a key path (e.g.
// "upstream.url", "listen", "store.valkey.addrs") to its value written as
// in an environment variable (store.valkey.addrs comma-separated); each
// value is parsed and validated like the key it sets, and its errors name
// that key. Only the keys the environment may override are accepted (see
// EnvName); Load reports any other key as an error. The map is read, never
// kept or changed. A later WithOverrides replaces an earlier one.
func WithOverrides(overrides map[string]string) LoadOption {
	return func(o *loadOptions) { o.overrides = overrides }
}

func load(data []byte, fromFile bool, environ []string, o loadOptions) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if fromFile {
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
	}
	// Set last wins in viper: the environment over the file, the overrides
	// over both.
	applyEnv(v, environ)
	var errs []error
	errs = append(errs, applyOverrides(v, o.overrides)...)

	var raw rawConfig
	if err := v.UnmarshalExact(&raw); err != nil {
		errs = append(errs, decodeErrors(err)...)
	}
	b := builder{failed: map[string]bool{}}
	c := b.build(&raw)
	errs = append(errs, b.errs...)
	var later []error // may repeat a problem the builder already reported
	later = append(later, b.policyErrs...)
	if err := c.Validate(); err != nil {
		later = append(later, unjoin(err)...)
	}
	if c.Policy == nil {
		later = append(later, waitTimeoutErrs(b.merged, c.Upstream.Timeout)...)
	}
	for _, e := range later {
		var fe *policy.FieldError
		if errors.As(e, &fe) {
			if b.failed[fe.Path] {
				continue // already reported as unparsable
			}
			if fe.Path == "routes" && c.Policy == nil {
				continue // the policy errors say why
			}
			if fe.Path == "upstream.url" && !fromFile && c.Upstream.URL == nil {
				continue // the caller sets it and calls Validate
			}
		}
		errs = append(errs, e)
	}
	errs = b.dropInherited(errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

func applyEnv(v *viper.Viper, environ []string) {
	byName := make(map[string]string, len(envKeys))
	for _, k := range envKeys {
		byName[EnvName(k)] = k
	}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		key, known := byName[name]
		if !known {
			continue
		}
		set(v, key, value)
	}
}

// applyOverrides sets every override on v, in key order so that the errors
// come out the same way every time; it returns an error for each key that
// cannot be overridden.
func applyOverrides(v *viper.Viper, overrides map[string]string) []error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(overrides)) {
		if !slices.Contains(envKeys, key) {
			errs = append(errs, &policy.FieldError{Path: key, Err: errors.New("cannot be overridden (not a key, or a policy key that only the file sets)")})
			continue
		}
		set(v, key, overrides[key])
	}
	return errs
}

// set gives key the string value of an environment variable or an
// override: store.valkey.addrs is a comma-separated list, every other value
// is decoded like the file's.
func set(v *viper.Viper, key, value string) {
	if key == "store.valkey.addrs" {
		var addrs []string
		for _, a := range strings.Split(value, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		v.Set(key, addrs)
		return
	}
	v.Set(key, value)
}

// decodeErrors splits the decoder's aggregate error into one error per
// problem, rewritten as "path: problem" so that each names its key path
// (an unknown key becomes "path.key: unknown key").
func decodeErrors(err error) []error {
	var out []error
	for _, e := range unjoin(err) {
		msg := strings.TrimPrefix(e.Error(), "decoding failed due to the following error(s):\n\n")
		for _, line := range strings.Split(msg, "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			m := decodeLineRE.FindStringSubmatch(line)
			if m == nil {
				out = append(out, errors.New(line))
				continue
			}
			path, problem := m[1], m[2]
			if path == rawTypeName {
				path = "" // mapstructure >= v2.5 names the top level by its Go type
			}
			if keys, ok := strings.CutPrefix(problem, "has invalid keys: "); ok {
				for _, k := range strings.Split(keys, ", ") {
					if path != "" {
						k = path + "." + k
					}
					out = append(out, &policy.FieldError{Path: k, Err: errors.New("unknown key")})
				}
				continue
			}
			if path == "" {
				path = "(top level)"
			}
			out = append(out, &policy.FieldError{Path: path, Err: errors.New(strings.ReplaceAll(problem, "'", ""))})
		}
	}
	return out
}

// rawTypeName is how mapstructure names the top level in its errors.
var rawTypeName = fmt.Sprintf("%T", rawConfig{})

// decodeLineRE matches mapstructure's "'path' problem" error lines.
var decodeLineRE = regexp.MustCompile(`^'([^']*)' (.*)$`)

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// rawConfig mirrors the YAML; pointers tell a key that is absent from one
// that is set, so that routes inherit only what they do not set.
type rawConfig struct {
	Listen   *string `mapstructure:"listen"`
	Upstream struct {
		URL     *string `mapstructure:"url"`
		Timeout *string `mapstructure:"timeout"`
	} `mapstructure:"upstream"`
	Admin struct {
		Listen *string `mapstructure:"listen"`
		Token  *string `mapstructure:"token"`
	} `mapstructure:"admin"`
	Store struct {
		Driver *string `mapstructure:"driver"`
		Valkey struct {
			Addrs          *[]string `mapstructure:"addrs"`
			Username       *string   `mapstructure:"username"`
			Password       *string   `mapstructure:"password"`
			TLS            *bool     `mapstructure:"tls"`
			KeyPrefix      *string   `mapstructure:"key_prefix"`
			SentinelMaster *string   `mapstructure:"sentinel_master"`
			Acks           struct {
				Replicas *int    `mapstructure:"replicas"`
				AOFLocal *bool   `mapstructure:"aof_local"`
				Timeout  *string `mapstructure:"timeout"`
			} `mapstructure:"acks"`
		} `mapstructure:"valkey"`
		Bolt struct {
			Path *string `mapstructure:"path"`
		} `mapstructure:"bolt"`
		Postgres struct {
			DSN      *string `mapstructure:"dsn"`
			Table    *string `mapstructure:"table"`
			MaxConns *int    `mapstructure:"max_conns"`
		} `mapstructure:"postgres"`
		V1Lookup *bool `mapstructure:"v1_lookup"`
	} `mapstructure:"store"`
	Log struct {
		Format *string `mapstructure:"format"`
		Level  *string `mapstructure:"level"`
	} `mapstructure:"log"`
	Server struct {
		ReadHeaderTimeout *string `mapstructure:"read_header_timeout"`
		ReadTimeout       *string `mapstructure:"read_timeout"`
		WriteTimeout      *string `mapstructure:"write_timeout"`
		IdleTimeout       *string `mapstructure:"idle_timeout"`
		ShutdownTimeout   *string `mapstructure:"shutdown_timeout"`
		MaxHeaderBytes    *string `mapstructure:"max_header_bytes"`
	} `mapstructure:"server"`
	Tracing struct {
		Enabled     *bool    `mapstructure:"enabled"`
		Endpoint    *string  `mapstructure:"endpoint"`
		Protocol    *string  `mapstructure:"protocol"`
		Insecure    *bool    `mapstructure:"insecure"`
		SampleRatio *float64 `mapstructure:"sample_ratio"`
		ServiceName *string  `mapstructure:"service_name"`
	} `mapstructure:"tracing"`
	Defaults rawSettings `mapstructure:"defaults"`
	Routes   []rawRoute  `mapstructure:"routes"`
}

type rawRoute struct {
	Name        *string `mapstructure:"name"`
	Match       *string `mapstructure:"match"`
	rawSettings `mapstructure:",squash"`
}

type rawSettings struct {
	Mode             *string         `mapstructure:"mode"`
	Scope            *string         `mapstructure:"scope"`
	Header           *string         `mapstructure:"header"`
	Methods          *[]string       `mapstructure:"methods"`
	Required         *bool           `mapstructure:"required"`
	Owner            *string         `mapstructure:"owner"`
	JWT              *rawJWT         `mapstructure:"jwt"`
	AllowGlobalKeys  *bool           `mapstructure:"allow_global_keys"`
	Fingerprint      *rawFingerprint `mapstructure:"fingerprint"`
	Lease            *string         `mapstructure:"lease"`
	Retention        *string         `mapstructure:"retention"`
	Concurrent       *string         `mapstructure:"concurrent"`
	WaitTimeout      *string         `mapstructure:"wait_timeout"`
	ReplayStatuses   *[]string       `mapstructure:"replay_statuses"`
	MaxRequestBytes  *string         `mapstructure:"max_request_bytes"`
	MaxResponseBytes *string         `mapstructure:"max_response_bytes"`
	OnStoreError     *string         `mapstructure:"on_store_error"`
	OnAbandoned      *string         `mapstructure:"on_abandoned"`
}

// rawJWT is a `jwt:` section (owner: jwt); see policy.JWTSettings.
type rawJWT struct {
	JWKSFile  *string   `mapstructure:"jwks_file"`
	JWKSURL   *string   `mapstructure:"jwks_url"`
	Issuers   *[]string `mapstructure:"issuers"`
	Audiences *[]string `mapstructure:"audiences"`
	Claims    *[]string `mapstructure:"claims"`
}

type rawFingerprint struct {
	Headers *[]string `mapstructure:"headers"`
	Query   *bool     `mapstructure:"query"`
	Body    *string   `mapstructure:"body"`
}

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

	defaults := policy.DefaultRoute()
	b.apply(&defaults, &raw.Defaults, "defaults")
	routes := make([]policy.Route, len(raw.Routes))
	b.set = make([]map[string]bool, len(raw.Routes))
	for i := range raw.Routes {
		rr := &raw.Routes[i]
		path := fmt.Sprintf("routes[%d]", i)
		r := defaults
		r.Methods = append([]string(nil), defaults.Methods...)
		r.Fingerprint.Headers = append([]string(nil), defaults.Fingerprint.Headers...)
		r.ReplayStatuses = append([]policy.StatusRange(nil), defaults.ReplayStatuses...)
		r.Name = ""
		if rr.Name == nil {
			b.bad(path+".name", "is required")
		} else {
			r.Name = *rr.Name
		}
		if rr.Match != nil {
			r.Match = *rr.Match
		}
		b.set[i] = rr.rawSettings.setFields()
		b.apply(&r, &rr.rawSettings, path)
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

// apply overrides r with the settings that s sets; path is "defaults" or
// "routes[i]".
func (b *builder) apply(r *policy.Route, s *rawSettings, path string) {
	if s.Mode != nil {
		r.Mode = policy.Mode(*s.Mode)
	}
	b.str(&r.Scope, s.Scope)
	b.str(&r.Header, s.Header)
	if s.Methods != nil {
		r.Methods = append([]string(nil), (*s.Methods)...)
	}
	if s.Required != nil {
		r.Required = *s.Required
	}
	if s.Owner != nil {
		o, err := policy.ParseOwnerSource(strings.TrimSpace(*s.Owner))
		if err != nil {
			b.bad(path+".owner", "%v", err)
		} else {
			r.Owner = o
		}
	}
	if j := s.JWT; j != nil {
		r.JWT = mergeJWT(r.JWT, j)
	} else if r.JWT != nil && r.Owner.Kind != policy.OwnerJWT {
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
			r.Fingerprint.Body = policy.BodyMode(*f.Body)
		}
	}
	b.duration(path+".lease", &r.Lease, s.Lease)
	b.duration(path+".retention", &r.Retention, s.Retention)
	if s.Concurrent != nil {
		r.Concurrent = policy.Concurrent(*s.Concurrent)
	}
	b.duration(path+".wait_timeout", &r.WaitTimeout, s.WaitTimeout)
	if s.ReplayStatuses != nil {
		var st []policy.StatusRange
		ok := true
		for _, v := range *s.ReplayStatuses {
			sr, err := policy.ParseStatus(v)
			if err != nil {
				b.bad(path+".replay_statuses", "%v", err)
				ok = false
				continue
			}
			st = append(st, sr)
		}
		if ok {
			r.ReplayStatuses = st
		}
	}
	b.size(path+".max_request_bytes", &r.MaxRequestBytes, s.MaxRequestBytes)
	b.size(path+".max_response_bytes", &r.MaxResponseBytes, s.MaxResponseBytes)
	if s.OnStoreError != nil {
		r.OnStoreError = policy.OnStoreError(*s.OnStoreError)
	}
	if s.OnAbandoned != nil {
		r.OnAbandoned = policy.OnAbandoned(*s.OnAbandoned)
	}
}

// mergeJWT returns the `jwt:` settings of a route whose inherited settings
// are base (nil if none) and whose own section is j: every key j sets
// replaces the inherited one, and jwks_file and jwks_url replace each other,
// being one choice. Claims default to policy.DefaultJWTClaims.
func mergeJWT(base *policy.JWTSettings, j *rawJWT) *policy.JWTSettings {
	out := &policy.JWTSettings{Claims: policy.DefaultJWTClaims()}
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

// setFields returns the key names (relative to the route, e.g. "lease",
// "fingerprint.body") that s sets.
func (s *rawSettings) setFields() map[string]bool {
	m := map[string]bool{}
	add := func(name string, set bool) {
		if set {
			m[name] = true
		}
	}
	add("mode", s.Mode != nil)
	add("scope", s.Scope != nil)
	add("header", s.Header != nil)
	add("methods", s.Methods != nil)
	add("required", s.Required != nil)
	add("owner", s.Owner != nil)
	add("allow_global_keys", s.AllowGlobalKeys != nil)
	if j := s.JWT; j != nil {
		add("jwt", true)
		add("jwt.jwks_file", j.JWKSFile != nil || j.JWKSURL != nil)
		add("jwt.jwks_url", j.JWKSFile != nil || j.JWKSURL != nil)
		add("jwt.issuers", j.Issuers != nil)
		add("jwt.audiences", j.Audiences != nil)
		add("jwt.claims", j.Claims != nil)
	}
	if f := s.Fingerprint; f != nil {
		add("fingerprint.headers", f.Headers != nil)
		add("fingerprint.query", f.Query != nil)
		add("fingerprint.body", f.Body != nil)
	}
	add("lease", s.Lease != nil)
	add("retention", s.Retention != nil)
	add("concurrent", s.Concurrent != nil)
	add("wait_timeout", s.WaitTimeout != nil)
	add("replay_statuses", s.ReplayStatuses != nil)
	add("max_request_bytes", s.MaxRequestBytes != nil)
	add("max_response_bytes", s.MaxResponseBytes != nil)
	add("on_store_error", s.OnStoreError != nil)
	add("on_abandoned", s.OnAbandoned != nil)
	return m
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
