package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-viper/mapstructure/v2"

	"github.com/idemgate/idemgate/policy"
)

// decodeErrors turns the decoder's error into one error per problem, each
// naming its key path. mapstructure reports each problem as a
// *mapstructure.DecodeError whose Name is the path (the Go type's name at
// the top level) and whose Unwrap is the problem; viper wraps their
// errors.Join once. A mistyped value becomes a *policy.FieldError at its
// path; an unknown key becomes one *policy.FieldError per key
// ("path.key: unknown key").
func decodeErrors(err error) []error {
	var out []error
	for _, e := range decodeLeaves(err) {
		var de *mapstructure.DecodeError
		if !errors.As(e, &de) {
			out = append(out, e)
			continue
		}
		path, problem := de.Name(), de.Unwrap().Error()
		if path == rawTypeName {
			path = "" // mapstructure >= v2.5 names the top level by its Go type
		}
		// Unknown keys (ErrorUnused) are the one problem mapstructure gives
		// no type of its own: one error per struct, listing the keys. Its
		// path still comes from Name, only the list from the text.
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
		// The quotes mapstructure puts around type names read as noise
		// next to a key path.
		out = append(out, &policy.FieldError{Path: path, Err: errors.New(strings.ReplaceAll(problem, "'", ""))})
	}
	return out
}

// decodeLeaves unwraps err down to the decoder's *mapstructure.DecodeError
// values, through joins and single wraps alike (viper adds "decoding failed
// due to the following error(s)" around the join). A DecodeError is a leaf:
// its Unwrap is the problem, not another path.
func decodeLeaves(err error) []error {
	if _, ok := err.(*mapstructure.DecodeError); ok {
		return []error{err}
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, decodeLeaves(e)...)
		}
		return out
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return decodeLeaves(inner)
		}
	}
	return []error{err}
}

// rawTypeName is how mapstructure names the top level in its errors.
var rawTypeName = fmt.Sprintf("%T", rawConfig{})

// unjoin flattens errors.Join trees, so that Load reports each problem as
// one line (and can drop the ones another already explains).
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

// rawConfig mirrors the YAML, and is the one schema of the file: the
// decoder reads its mapstructure tags, and so do keyPaths (the keys the
// environment may set) and the test that keeps config.example.yaml
// complete. Pointers tell a key that is absent from one that is set, so
// that routes inherit only what they do not set, and the environment
// overrides only what it names. Values that need parsing (durations,
// sizes, URLs) are strings here: builder parses them and reports a bad one
// at its key path.
type rawConfig struct {
	Listen   *string `mapstructure:"listen"`
	Upstream struct {
		URL      *string `mapstructure:"url"`
		Timeout  *string `mapstructure:"timeout"`
		PassHost *bool   `mapstructure:"pass_host"`
		TLS      struct {
			CAFile             *string `mapstructure:"ca_file"`
			ServerName         *string `mapstructure:"server_name"`
			CertFile           *string `mapstructure:"cert_file"`
			KeyFile            *string `mapstructure:"key_file"`
			InsecureSkipVerify *bool   `mapstructure:"insecure_skip_verify"`
		} `mapstructure:"tls"`
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
			CacheBytes    *string `mapstructure:"cache_bytes"`
			Layout        *int    `mapstructure:"layout"`
			MaxFlushDelay *string `mapstructure:"max_flush_delay"`
			Connections   *int    `mapstructure:"connections"`
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
		Access *bool   `mapstructure:"access"`
		Query  *bool   `mapstructure:"query"`
	} `mapstructure:"log"`
	Server struct {
		ReadHeaderTimeout *string   `mapstructure:"read_header_timeout"`
		ReadTimeout       *string   `mapstructure:"read_timeout"`
		WriteTimeout      *string   `mapstructure:"write_timeout"`
		IdleTimeout       *string   `mapstructure:"idle_timeout"`
		ShutdownTimeout   *string   `mapstructure:"shutdown_timeout"`
		MaxHeaderBytes    *string   `mapstructure:"max_header_bytes"`
		TrustedProxies    *[]string `mapstructure:"trusted_proxies"`
		MaxWaiters        *int      `mapstructure:"max_waiters"`
		MaxStoreWaiting   *int      `mapstructure:"max_store_waiting"`
		H2C               *bool     `mapstructure:"h2c"`
		TLS               struct {
			CertFile     *string `mapstructure:"cert_file"`
			KeyFile      *string `mapstructure:"key_file"`
			MinVersion   *string `mapstructure:"min_version"`
			ClientCAFile *string `mapstructure:"client_ca_file"`
			ClientAuth   *string `mapstructure:"client_auth"`
		} `mapstructure:"tls"`
	} `mapstructure:"server"`
	Tracing struct {
		Enabled     *bool    `mapstructure:"enabled"`
		Endpoint    *string  `mapstructure:"endpoint"`
		Protocol    *string  `mapstructure:"protocol"`
		Insecure    *bool    `mapstructure:"insecure"`
		SampleRatio *float64 `mapstructure:"sample_ratio"`
		ServiceName *string  `mapstructure:"service_name"`
	} `mapstructure:"tracing"`
	Problems struct {
		DocsURL     *string `mapstructure:"docs_url"`
		TypeBase    *string `mapstructure:"type_base"`
		rawProblems `mapstructure:",squash"`
	} `mapstructure:"problems"`
	Defaults rawSettings `mapstructure:"defaults"`
	Routes   []rawRoute  `mapstructure:"routes"`
}

// rawRoute is one entry of `routes:`: its name and match, and the settings
// it overrides from `defaults:`.
type rawRoute struct {
	Name     *string `mapstructure:"name"`
	Match    *string `mapstructure:"match"`
	Upstream *string `mapstructure:"upstream"`
	// Problems overrides the top-level problems.template, content_type
	// and headers for this route's answers, each key on its own.
	Problems    *rawProblems `mapstructure:"problems"`
	rawSettings `mapstructure:",squash"`
}

// rawProblems are the keys that shape the problem answers of the proxy
// (problem.Format), at the top level `problems:` or in a route's: they are
// part of the policy, reloaded with it.
type rawProblems struct {
	Template    *string                       `mapstructure:"template"`
	ContentType *string                       `mapstructure:"content_type"`
	Headers     *map[string]map[string]string `mapstructure:"headers"`
}

// rawSettings are the route policy keys, under `defaults:` or one route.
type rawSettings struct {
	Mode             *string         `mapstructure:"mode"`
	Scope            *string         `mapstructure:"scope"`
	Header           *string         `mapstructure:"header"`
	Key              *rawKey         `mapstructure:"key"`
	Methods          *[]string       `mapstructure:"methods"`
	Required         *bool           `mapstructure:"required"`
	Owner            *[]string       `mapstructure:"owner"` // one source, or a list (identity.ParseOwnerSources)
	JWT              *rawJWT         `mapstructure:"jwt"`
	AllowGlobalKeys  *bool           `mapstructure:"allow_global_keys"`
	Fingerprint      *rawFingerprint `mapstructure:"fingerprint"`
	Lease            *string         `mapstructure:"lease"`
	Retention        *string         `mapstructure:"retention"`
	Concurrent       *string         `mapstructure:"concurrent"`
	WaitTimeout      *string         `mapstructure:"wait_timeout"`
	ReplayStatuses   *[]string       `mapstructure:"replay_statuses"`
	UnknownStatuses  *[]string       `mapstructure:"unknown_statuses"`
	ReplayGRPCCodes  *[]string       `mapstructure:"replay_grpc_codes"`
	MaxRequestBytes  *string         `mapstructure:"max_request_bytes"`
	MaxResponseBytes *string         `mapstructure:"max_response_bytes"`
	OnStoreError     *string         `mapstructure:"on_store_error"`
	OnAbandoned      *string         `mapstructure:"on_abandoned"`
	AdvertiseExpiry  *bool           `mapstructure:"advertise_expiry"`
	ResourceFrom     *string         `mapstructure:"resource_from"`
	TombstoneMethods *[]string       `mapstructure:"tombstone_methods"`
}

// rawJWT is a `jwt:` section (owner: jwt); see identity.JWTSettings.
type rawJWT struct {
	JWKSFile  *string   `mapstructure:"jwks_file"`
	JWKSURL   *string   `mapstructure:"jwks_url"`
	Issuers   *[]string `mapstructure:"issuers"`
	Audiences *[]string `mapstructure:"audiences"`
	Claims    *[]string `mapstructure:"claims"`
}

// rawKey is a `key:` section; see identity.KeySource. With from: header,
// name is the key field, like `header:`.
type rawKey struct {
	From    *string `mapstructure:"from"`
	Name    *string `mapstructure:"name"`
	Pointer *string `mapstructure:"pointer"`
}

// rawFingerprint is a `fingerprint:` section; see fingerprint.Spec.
type rawFingerprint struct {
	Headers    *[]string `mapstructure:"headers"`
	Query      *bool     `mapstructure:"query"`
	Body       *string   `mapstructure:"body"`
	Exclude    *[]string `mapstructure:"exclude"`
	MediaTypes *string   `mapstructure:"media_types"`
	// Descriptors is fingerprint.descriptors: a FileDescriptorSet file
	// for body: protobuf (fingerprint.LoadProtoSchema).
	Descriptors *string `mapstructure:"descriptors"`
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
	if k := s.Key; k != nil {
		add("key.from", k.From != nil)
		add("key.name", k.Name != nil)
		add("key.pointer", k.Pointer != nil)
	}
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
		add("fingerprint.exclude", f.Exclude != nil)
		add("fingerprint.media_types", f.MediaTypes != nil)
		add("fingerprint.descriptors", f.Descriptors != nil)
	}
	add("lease", s.Lease != nil)
	add("retention", s.Retention != nil)
	add("concurrent", s.Concurrent != nil)
	add("wait_timeout", s.WaitTimeout != nil)
	add("replay_statuses", s.ReplayStatuses != nil)
	add("unknown_statuses", s.UnknownStatuses != nil)
	add("replay_grpc_codes", s.ReplayGRPCCodes != nil)
	add("max_request_bytes", s.MaxRequestBytes != nil)
	add("max_response_bytes", s.MaxResponseBytes != nil)
	add("on_store_error", s.OnStoreError != nil)
	add("on_abandoned", s.OnAbandoned != nil)
	add("advertise_expiry", s.AdvertiseExpiry != nil)
	add("resource_from", s.ResourceFrom != nil)
	add("tombstone_methods", s.TombstoneMethods != nil)
	return m
}

// keyPaths returns the key paths of t, a raw* struct type, as the decoder
// sees them: mapstructure tag names joined by ".", a squashed struct's keys
// at its parent's level, a section (a struct, or a pointer to one) by its
// keys. A list of sections (routes) is one key: its entries' keys are
// keyPaths of the entry type.
func keyPaths(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case opts == "squash":
			out = append(out, keyPaths(ft, prefix)...)
		case ft.Kind() == reflect.Struct:
			out = append(out, keyPaths(ft, prefix+name+".")...)
		default:
			out = append(out, prefix+name)
		}
	}
	return out
}
