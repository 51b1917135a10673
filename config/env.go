package config

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/viper"

	"github.com/idemgate/idemgate/policy"
)

// EnvPrefix starts every environment override: the key path upper-cased
// with "." as "_", e.g. IDEMGATE_STORE_VALKEY_PASSWORD for
// store.valkey.password.
const EnvPrefix = "IDEMGATE_"

// overridableKeys are the keys that environment variables and overrides
// may set: every key of the file except the policy settings (defaults,
// routes), which come from the file only. They are read off rawConfig's
// tags (keyPaths), the decoder's own schema, so a key added to the file is
// overridable without a second list to keep in step.
var overridableKeys = slices.DeleteFunc(keyPaths(reflect.TypeFor[rawConfig](), ""), func(k string) bool {
	return k == "routes" || strings.HasPrefix(k, "defaults.")
})

// EnvName returns the environment variable that overrides key, e.g.
// "IDEMGATE_ADMIN_TOKEN" for "admin.token".
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// applyEnv sets on v every key that a variable of environ (entries
// "NAME=value", as os.Environ returns) names, as EnvName spells it.
// Variables that name no key, or a policy key, are ignored: the environment
// of a process carries much that is not meant for idemgate. Each key set is
// recorded in from.
func applyEnv(v *viper.Viper, environ []string, from Origins) {
	byName := make(map[string]string, len(overridableKeys))
	for _, k := range overridableKeys {
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
		from[key] = Origin{Key: key, Source: SourceEnv, Name: name}
	}
}

// applyOverrides sets every override on v, in key order so that the errors
// come out the same way every time; it returns an error for each key that
// cannot be overridden. Unlike a stray environment variable, an override
// that names no key is the caller's mistake (a flag wired to a misspelt
// key), so it is reported. Each key set is recorded in from.
func applyOverrides(v *viper.Viper, overrides map[string]string, from Origins) []error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(overrides)) {
		if !slices.Contains(overridableKeys, key) {
			errs = append(errs, &policy.FieldError{Path: key, Err: errors.New("cannot be overridden (not a key, or a policy key that only the file sets)")})
			continue
		}
		set(v, key, overrides[key])
		from[key] = Origin{Key: key, Source: SourceOverride}
	}
	return errs
}

// listKeys are the list-valued keys an environment variable or an override
// gives as a comma-separated list.
var listKeys = []string{"store.valkey.addrs", "server.trusted_proxies"}

// set gives key the string value of an environment variable or an
// override: a key of listKeys is a comma-separated list, every other value
// is decoded like the file's.
func set(v *viper.Viper, key, value string) {
	if slices.Contains(listKeys, key) {
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
