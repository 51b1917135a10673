package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/viper"

	"github.com/idemgate/idemgate/policy"
)

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
	if o.origins != nil {
		o.origins.named(path)
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
	inProcess bool
	origins   *Origins
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

// InProcess loads the configuration of the engine in process (package
// middleware, the Caddy module): the handler it wraps takes the place of
// the upstream, so upstream.url is not required (one that is set is
// checked, and not used). upstream.timeout still bounds one call of that
// handler.
func InProcess() LoadOption {
	return func(o *loadOptions) { o.inProcess = true }
}

// load is the one merge of Load and Parse, in stages, each in its own file:
// the YAML (data, when fromFile), then the environment and the overrides
// set over it in viper (env.go), decoded into the raw schema (decode.go),
// then built into a Config with a compiled policy (build.go) and
// validated. Every stage reports what it finds and the next one goes on,
// so one run names every problem; the errors of later stages that only
// repeat an earlier one are dropped at the end.
func load(data []byte, fromFile bool, environ []string, o loadOptions) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	from := Origins{}
	if fromFile {
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
		from.fromFile(v)
	}
	// Set last wins in viper: the environment over the file, the overrides
	// over both.
	applyEnv(v, environ, from)
	var errs []error
	errs = append(errs, applyOverrides(v, o.overrides, from)...)

	// Exact: a key the schema does not have is an error, not silence; a
	// misspelt "leese" would otherwise leave the default lease in force.
	var raw rawConfig
	if err := v.UnmarshalExact(&raw); err != nil {
		errs = append(errs, decodeErrors(err)...)
	}
	// A value that does not parse is reported here and replaced by the
	// inherited one, so validation below does not report it again.
	b := builder{failed: map[string]bool{}}
	c := b.build(&raw)
	errs = append(errs, b.errs...)
	if o.inProcess && raw.Store.V1Lookup == nil {
		// The engine in process came after layout 2 and never wrote a
		// layout 1 record, and its scopes carry the host, so the lookup
		// would cost every fresh key one more store read for records only
		// an old proxy fleet wrote (Config.Store.V1Lookup).
		c.Store.V1Lookup = false
	}
	// Policy and validation errors may repeat a problem the builder
	// already reported; they are filtered against it below.
	var later []error
	later = append(later, b.policyErrs...)
	if err := c.Validate(); err != nil {
		later = append(later, unjoin(err)...)
	}
	if c.Policy == nil {
		// Validate checks wait_timeout against upstream.timeout only on a
		// compiled policy; when the policy failed, check the merged routes
		// here so that this problem is not hidden behind the others.
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
			if fe.Path == "upstream.url" && (!fromFile || o.inProcess) && c.Upstream.URL == nil {
				continue // the caller sets it and calls Validate, or there is none (InProcess)
			}
		}
		errs = append(errs, e)
	}
	errs = b.dropInherited(errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.origins != nil {
		*o.origins = from
	}
	return c, nil
}
