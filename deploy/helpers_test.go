package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// repoRoot is the module root; go test runs with the package directory
// (deploy/) as working directory.
const repoRoot = ".."

// configSchema is the known key set of idemgate's config.yaml, from the
// shape fixed in the project brief plus policy.Route (mode,
// allow_global_keys) and config.ServerConfig (server.*). A nil value is a leaf; a map is a nested section.
//
// TODO: switch to config.Load(path, environ) once package config exists, so
// the manifests are checked by the real loader instead of this copy.
var configSchema = map[string]any{
	"listen":   nil,
	"upstream": map[string]any{"url": nil, "timeout": nil},
	"admin":    map[string]any{"listen": nil, "token": nil},
	"store": map[string]any{
		"driver": nil,
		"valkey": map[string]any{
			"addrs": nil, "username": nil, "password": nil, "tls": nil,
			"key_prefix": nil, "sentinel_master": nil,
		},
		"bolt": map[string]any{"path": nil},
	},
	"log": map[string]any{"format": nil, "level": nil},
	"server": map[string]any{
		"read_header_timeout": nil, "read_timeout": nil, "write_timeout": nil,
		"idle_timeout": nil, "shutdown_timeout": nil, "max_header_bytes": nil,
	},
	"defaults": routeSchema(false),
	// routes is a list of route sections; checked with routeSchema(true).
	"routes": nil,
}

// routeSchema returns the keys a defaults section (named=false) or a route
// entry (named=true) may hold.
func routeSchema(named bool) map[string]any {
	s := map[string]any{
		"header": nil, "methods": nil, "required": nil, "owner": nil,
		"fingerprint": map[string]any{"headers": nil, "query": nil, "body": nil},
		"lease":       nil, "retention": nil, "concurrent": nil, "wait_timeout": nil,
		"replay_statuses": nil, "max_request_bytes": nil, "max_response_bytes": nil,
		"on_store_error": nil, "on_abandoned": nil, "mode": nil, "allow_global_keys": nil,
	}
	if named {
		s["name"] = nil
		s["match"] = nil
	}
	return s
}

// envNames returns every environment variable that maps onto a config key:
// IDEMGATE_ + the key path upper-cased and joined by "_" (viper's
// SetEnvPrefix + SetEnvKeyReplacer(".", "_")). Routes are a list and cannot
// be set from the environment.
func envNames() map[string]string {
	out := map[string]string{}
	var walk func(prefix []string, s map[string]any)
	walk = func(prefix []string, s map[string]any) {
		for k, v := range s {
			p := append(slices.Clone(prefix), k)
			if sub, ok := v.(map[string]any); ok {
				walk(p, sub)
				continue
			}
			if k == "routes" && len(prefix) == 0 {
				continue
			}
			out["IDEMGATE_"+strings.ToUpper(strings.Join(p, "_"))] = strings.Join(p, ".")
		}
	}
	walk(nil, configSchema)
	return out
}

// goRuntimeEnv are the non-IDEMGATE_ variables a manifest may set: they tune
// the Go runtime, not idemgate.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GODEBUG": true}

// checkEnvName fails t when name is neither a Go runtime variable nor
// IDEMGATE_ + a real config key.
func checkEnvName(t *testing.T, where, name string) {
	t.Helper()
	if goRuntimeEnv[name] {
		return
	}
	if !strings.HasPrefix(name, "IDEMGATE_") {
		t.Errorf("%s: env %s is not IDEMGATE_-prefixed", where, name)
		return
	}
	if _, ok := envNames()[name]; !ok {
		t.Errorf("%s: env %s maps to no config key", where, name)
	}
}

// reporter is the part of *testing.T the checks report through, so a test
// can prove a check fires (see recorder).
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder is a reporter that keeps messages instead of failing.
type recorder struct{ msgs []string }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// has reports whether some message contains sub.
func (r *recorder) has(sub string) bool {
	return slices.ContainsFunc(r.msgs, func(m string) bool { return strings.Contains(m, sub) })
}

// checkConfigKeys reports every key of cfg that config.yaml does not know.
func checkConfigKeys(t reporter, where string, cfg map[string]any) {
	t.Helper()
	var walk func(path string, got map[string]any, schema map[string]any)
	walk = func(path string, got map[string]any, schema map[string]any) {
		for k, v := range got {
			full := strings.TrimPrefix(path+"."+k, ".")
			sub, known := schema[k]
			if !known {
				t.Errorf("%s: unknown config key %q", where, full)
				continue
			}
			if full == "routes" {
				routes, ok := v.([]any)
				if !ok {
					t.Errorf("%s: routes is %T, want a list", where, v)
					continue
				}
				for i, r := range routes {
					rm, ok := r.(map[string]any)
					if !ok {
						t.Errorf("%s: routes[%d] is %T, want a mapping", where, i, r)
						continue
					}
					if rm["name"] == nil || rm["match"] == nil {
						t.Errorf("%s: routes[%d] needs name and match", where, i)
					}
					walk(fmt.Sprintf("routes[%d]", i), rm, routeSchema(true))
				}
				continue
			}
			subSchema, isSection := sub.(map[string]any)
			gotMap, gotIsMap := v.(map[string]any)
			switch {
			case isSection && !gotIsMap:
				t.Errorf("%s: %s is %T, want a mapping", where, full, v)
			case !isSection && gotIsMap:
				t.Errorf("%s: %s is a mapping, want a value", where, full)
			case isSection:
				walk(full, gotMap, subSchema)
			}
		}
	}
	walk("", cfg, configSchema)
}

// lookup returns the value at a dotted path of nested mappings, or nil.
func lookup(m map[string]any, path string) any {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

// str returns the string at path, failing t when it is missing or not a string.
func str(t *testing.T, where string, m map[string]any, path string) string {
	t.Helper()
	s, ok := lookup(m, path).(string)
	if !ok {
		t.Fatalf("%s: %s is %T (%v), want a string", where, path, lookup(m, path), lookup(m, path))
	}
	return s
}

// configDefaults are the defaults of the brief's shape for keys a file may
// leave out.
var configDefaults = map[string]string{
	"listen": ":8080", "admin.listen": "127.0.0.1:9090",
	"upstream.timeout": "60s", "server.shutdown_timeout": "30s",
}

// configStr returns the string at path or its default.
func configStr(t *testing.T, where string, cfg map[string]any, path string) string {
	t.Helper()
	if lookup(cfg, path) == nil {
		if d, ok := configDefaults[path]; ok {
			return d
		}
	}
	return str(t, where, cfg, path)
}

// listenPort returns the port of a listen address such as ":8080".
func listenPort(t *testing.T, where, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: listen address %q: %v", where, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		t.Fatalf("%s: listen address %q has no numeric port", where, addr)
	}
	return n
}

// listenHost returns the host part of a listen address ("" for ":9090").
func listenHost(t *testing.T, where, addr string) string {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: listen address %q: %v", where, addr, err)
	}
	return host
}

// duration parses a Go duration setting such as "30s" (or its default).
func duration(t *testing.T, where string, cfg map[string]any, path string) time.Duration {
	t.Helper()
	s := configStr(t, where, cfg, path)
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %s = %q: %v", where, path, s, err)
	}
	return d
}

// parseConfig parses one config.yaml text, failing t on bad YAML.
func parseConfig(t *testing.T, where string, text []byte) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(text, &cfg); err != nil {
		t.Fatalf("%s: config.yaml: %v", where, err)
	}
	if len(cfg) == 0 {
		t.Fatalf("%s: config.yaml is empty", where)
	}
	return cfg
}

// readYAMLDocs parses every document of a (multi-document) YAML file.
func readYAMLDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s holds no YAML document", path)
	}
	return docs
}

// list returns v as a slice of mappings, failing t otherwise.
func maps(t *testing.T, where string, v any) []map[string]any {
	t.Helper()
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: %T, want a list", where, v)
	}
	out := make([]map[string]any, 0, len(l))
	for i, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("%s[%d]: %T, want a mapping", where, i, e)
		}
		out = append(out, m)
	}
	return out
}

// strs returns v as a list of strings (a single string becomes one element).
func strs(t *testing.T, where string, v any) []string {
	t.Helper()
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				t.Fatalf("%s[%d]: %T, want a string", where, i, e)
			}
			out = append(out, s)
		}
		return out
	}
	t.Fatalf("%s: %T, want a list of strings", where, v)
	return nil
}

// toInt converts a YAML number to int.
func toInt(t *testing.T, where string, v any) int {
	t.Helper()
	switch v := v.(type) {
	case int:
		return v
	case string:
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	t.Fatalf("%s: %v (%T), want an integer", where, v, v)
	return 0
}

var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// interpolate expands compose's ${VAR}, ${VAR:-default} and ${VAR:?msg}
// from env (a required variable that is unset becomes "") and turns the
// escape $$ into $.
func interpolate(s string, env map[string]string) string {
	const dollar = "\x00"
	s = strings.ReplaceAll(s, "$$", dollar)
	s = interpolation.ReplaceAllStringFunc(s, func(m string) string {
		sub := interpolation.FindStringSubmatch(m)
		if v, ok := env[sub[1]]; ok && (v != "" || !strings.HasPrefix(sub[2], ":")) {
			return v
		}
		if strings.HasSuffix(sub[2], "-") {
			return sub[3]
		}
		return ""
	})
	return strings.ReplaceAll(s, dollar, "$")
}

// sortedKeys returns m's keys in order, for stable messages.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// path joins parts under the repository root.
func path(parts ...string) string {
	return filepath.Join(append([]string{repoRoot}, parts...)...)
}
