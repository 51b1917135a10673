package config

import "github.com/spf13/viper"

// Source is the layer of Load's merge that set a key (Load: the file,
// then the environment, then the overrides).
type Source int

// The layers of Load's merge, from the weakest.
const (
	// SourceDefault: nothing set the key; the built-in default is in force.
	SourceDefault Source = iota
	// SourceFile: the YAML file (Load's path, or Parse's data).
	SourceFile
	// SourceEnv: an environment variable (EnvName).
	SourceEnv
	// SourceOverride: an override given with WithOverrides (a flag of
	// idemgate serve, an option of the Caddy module).
	SourceOverride
)

// Origin says where the value of one configuration key came from
// (WithOrigins), so that a caller that adds rules of its own over the keys (the Caddy module's
// store_addrs selects the valkey driver when no driver is named) need not
// read the file and the environment again, nor decide differently from
// Load which of them wins.
type Origin struct {
	// Key is the key path, e.g. "store.driver".
	Key string
	// Source is the layer that set the key last: its value is in force.
	Source Source
	// Name is the file's path (SourceFile, Load only: "" for Parse) or the
	// environment variable (SourceEnv); "" otherwise.
	Name string
}

// String says where the value came from, for an error message:
// "store.driver in /etc/idemgate.yaml", "IDEMGATE_STORE_DRIVER", "the
// store.driver override" or "the built-in default of store.driver".
func (o Origin) String() string {
	switch o.Source {
	case SourceFile:
		if o.Name == "" {
			return o.Key + " in the configuration"
		}
		return o.Key + " in " + o.Name
	case SourceEnv:
		return o.Name
	case SourceOverride:
		return "the " + o.Key + " override"
	}
	return "the built-in default of " + o.Key
}

// Origins are where the value of each key of one configuration came
// from, as Load and Parse merged it (WithOrigins), for the keys the
// environment may set: every key but defaults and routes, which only the
// file sets (EnvName).
type Origins map[string]Origin

// WithOrigins makes Load and Parse record in *into where the value of
// each key came from, when they succeed; *into is replaced, never merged.
func WithOrigins(into *Origins) LoadOption {
	return func(o *loadOptions) { o.origins = into }
}

// Of returns where the value of key came from: SourceDefault when nothing
// set it, or for a key Origins does not cover.
func (m Origins) Of(key string) Origin {
	if o, ok := m[key]; ok {
		return o
	}
	return Origin{Key: key, Source: SourceDefault}
}

// fromFile records the keys the YAML read into v sets.
func (m Origins) fromFile(v *viper.Viper) {
	for _, k := range overridableKeys {
		if v.IsSet(k) {
			m[k] = Origin{Key: k, Source: SourceFile}
		}
	}
}

// named gives the file's path to the keys it set (Load).
func (m Origins) named(path string) {
	for k, o := range m {
		if o.Source == SourceFile {
			o.Name = path
			m[k] = o
		}
	}
}
