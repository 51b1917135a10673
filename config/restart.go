package config

import (
	"net/url"
	"reflect"
	"slices"
	"strings"
)

// RestartKeys returns the key paths (e.g. "upstream.url", "listen",
// "store.driver", "server.tls.cert_file") whose effective values differ
// between old and next outside the policy: a reload applies only
// `defaults:` and `routes:`, so these keep their old values until the
// process restarts, and the reloader says so (a changed upstream used to
// be kept silently; TestRestartRequiredKeys). Secrets are named, never shown.
func RestartKeys(old, next *Config) []string {
	if old == nil || next == nil {
		return nil
	}
	var out []string
	diffValues(reflect.ValueOf(*old), reflect.ValueOf(*next), "", &out)
	slices.Sort(out)
	return slices.Compact(out)
}

// urlType is compared by its string, not field by field.
var urlType = reflect.TypeFor[*url.URL]()

// diffValues walks the Config struct (Policy left out) and appends the key
// path of every leaf that differs. A leaf's path is its Go field path
// matched to the schema's key (keyFor).
func diffValues(a, b reflect.Value, prefix string, out *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "Policy" || !f.IsExported() {
			continue
		}
		path := prefix + strings.ToLower(f.Name)
		av, bv := a.Field(i), b.Field(i)
		switch {
		case f.Type == urlType:
			if urlString(av) != urlString(bv) {
				*out = append(*out, keyFor(path))
			}
		case f.Type.Kind() == reflect.Struct:
			diffValues(av, bv, path+".", out)
		default:
			if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
				*out = append(*out, keyFor(path))
			}
		}
	}
}

func urlString(v reflect.Value) string {
	if v.IsNil() {
		return ""
	}
	return v.Interface().(*url.URL).String()
}

// keyFor maps a lower-cased Go field path ("store.valkey.acks.aoflocal")
// to the schema's key path ("store.valkey.acks.aof_local"): the one
// overridable key that is the same without its underscores.
func keyFor(goPath string) string {
	for _, k := range overridableKeys {
		if strings.ReplaceAll(k, "_", "") == goPath {
			return k
		}
	}
	return goPath
}
