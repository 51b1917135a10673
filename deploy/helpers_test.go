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
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// repoRoot is the module root; go test runs with the package directory
// (deploy/) as working directory.
const repoRoot = ".."

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

// path joins parts under the repository root.
func path(parts ...string) string {
	return filepath.Join(append([]string{repoRoot}, parts...)...)
}
