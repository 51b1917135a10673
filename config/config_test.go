package config

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
)

const base = "upstream: {url: 'http://127.0.0.1:3000'}\n"

func writeFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustParse(t *testing.T, data string, env ...string) *Config {
	t.Helper()
	c, err := Load(writeFile(t, data), env)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func route(t *testing.T, c *Config, name string) *policy.Route {
	t.Helper()
	for _, r := range c.Policy.Routes() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no route %q", name)
	return nil
}

func TestExampleLoads(t *testing.T) {
	c, err := Load("../config.example.yaml", nil)
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	if c.Upstream.URL.String() != "http://127.0.0.1:3000" || c.Upstream.Timeout != 60*time.Second {
		t.Errorf("upstream = %+v", c.Upstream)
	}
	if c.Store.Driver != DriverValkey || !slices.Equal(c.Store.Valkey.Addrs, []string{"127.0.0.1:6379"}) || c.Store.Valkey.KeyPrefix != "idemgate:" {
		t.Errorf("store = %+v", c.Store)
	}
	names := []string{}
	for _, r := range c.Policy.Routes() {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"create-order", "capture-payment", "uploads", "default"}) {
		t.Errorf("routes = %v", names)
	}
	if r := route(t, c, "create-order"); !r.Required || !slices.Equal(r.Methods, []string{"POST"}) {
		t.Errorf("create-order = %+v", r)
	}
	if r := route(t, c, "capture-payment"); r.Fingerprint.Body != policy.BodyJSON || !r.Fingerprint.Query || !slices.Equal(r.Fingerprint.Headers, []string{"content-type"}) {
		t.Errorf("capture-payment fingerprint = %+v", r.Fingerprint)
	}
	if r := route(t, c, "uploads"); r.Mode != policy.ModePassthrough || r.Enforces("POST") {
		t.Errorf("uploads = %+v", r)
	}
	if got := c.Policy.Match(httptest.NewRequest("POST", "/v1/payments/9/capture", nil)); got.Name != "capture-payment" {
		t.Errorf("match = %s", got.Name)
	}
	if c.Server.MaxHeaderBytes != 1<<20 || c.Server.ReadHeaderTimeout != 10*time.Second {
		t.Errorf("server = %+v", c.Server)
	}
	var buf bytes.Buffer
	if err := c.Policy.Describe(&buf); err != nil || !strings.Contains(buf.String(), `- name: "capture-payment"`) {
		t.Errorf("Describe: %v\n%s", err, buf.String())
	}
}

// TestExampleDocumentsEveryKey keeps config.example.yaml complete: every
// key the loader knows appears in it with a comment on the same line or in
// its section.
func TestExampleDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	keys := append([]string{}, envKeys...)
	for _, k := range []string{"header", "methods", "required", "owner", "allow_global_keys", "fingerprint", "headers", "query", "body",
		"lease", "retention", "concurrent", "wait_timeout", "replay_statuses", "max_request_bytes", "max_response_bytes",
		"on_store_error", "on_abandoned", "name", "match", "mode"} {
		keys = append(keys, k)
	}
	for _, k := range keys {
		leaf := k[strings.LastIndex(k, ".")+1:]
		found := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimLeft(strings.TrimLeft(line, " "), "- "), leaf+":") && strings.Contains(line, "#") {
				found = true
			}
		}
		if !found {
			t.Errorf("config.example.yaml: key %s has no commented line", k)
		}
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if c.Listen != ":8080" || c.Admin.Listen != "127.0.0.1:9090" || c.Store.Driver != DriverMemory || c.Upstream.Timeout != time.Minute {
		t.Errorf("Default = %+v", c)
	}
	rs := c.Policy.Routes()
	if len(rs) != 1 || rs[0].Name != "default" {
		t.Fatalf("Default routes = %v", rs)
	}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "upstream.url: is required") {
		t.Fatalf("Validate without an upstream = %v", err)
	}
	if n := len(unjoin(err)); n != 1 {
		t.Errorf("Default has %d problems besides the upstream: %v", n-1, err)
	}
	c.Upstream.URL, _ = url.Parse("http://127.0.0.1:3000")
	if err := c.Validate(); err != nil {
		t.Fatalf("Default with an upstream: %v", err)
	}
	// Flags may then break it; Validate says so.
	c.Server.WriteTimeout = 30 * time.Second
	c.Admin.Listen = c.Listen
	err = c.Validate()
	for _, want := range []string{"server.write_timeout", "admin.listen"} {
		if err == nil || !strings.Contains(err.Error(), want+": ") {
			t.Errorf("Validate = %v, want a problem at %s", err, want)
		}
	}
}

func TestLoadWithoutFile(t *testing.T) {
	c, err := Load("", nil)
	if err != nil {
		t.Fatalf("Load(\"\") = %v; the caller sets the upstream later", err)
	}
	if c.Upstream.URL != nil || c.Store.Driver != DriverMemory {
		t.Errorf("Load(\"\") = %+v", c)
	}
	c, err = Load("", []string{"IDEMGATE_UPSTREAM_URL=https://backend:8443/base", "PATH=/bin"})
	if err != nil || c.Upstream.URL.String() != "https://backend:8443/base" {
		t.Fatalf("Load(\"\") with env = %+v, %v", c, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(writeFile(t, "listen: \":8080\"\n"), nil); err == nil || !strings.Contains(err.Error(), "upstream.url: is required") {
		t.Errorf("file without upstream.url: %v", err)
	}
}

func TestEnvOverrides(t *testing.T) {
	file := base + "admin: {token: from-file}\nstore:\n  driver: valkey\n  valkey: {addrs: ['10.0.0.1:6379'], password: file-pw}\n"
	c := mustParse(t, file,
		"IDEMGATE_STORE_VALKEY_PASSWORD=env-pw",
		"IDEMGATE_ADMIN_TOKEN=env-token",
		"IDEMGATE_UPSTREAM_URL=http://10.1.2.3:8000",
		"IDEMGATE_STORE_VALKEY_ADDRS=a:6379, b:6379,",
		"IDEMGATE_STORE_VALKEY_TLS=true",
		"IDEMGATE_LOG_LEVEL=debug",
		"IDEMGATE_SERVER_MAX_HEADER_BYTES=64KiB",
		"IDEMGATE_UNKNOWN=ignored",
		"NOT_IDEMGATE_ADMIN_TOKEN=x",
	)
	if c.Store.Valkey.Password != "env-pw" || c.Admin.Token != "env-token" || c.Upstream.URL.Host != "10.1.2.3:8000" {
		t.Errorf("env did not override: %+v %+v %v", c.Store.Valkey, c.Admin, c.Upstream.URL)
	}
	if !slices.Equal(c.Store.Valkey.Addrs, []string{"a:6379", "b:6379"}) || !c.Store.Valkey.TLS || c.Log.Level != "debug" || c.Server.MaxHeaderBytes != 64<<10 {
		t.Errorf("env lists/bools/sizes: %+v %+v %d", c.Store.Valkey, c.Log, c.Server.MaxHeaderBytes)
	}
	// Without env, the file's values stand.
	c = mustParse(t, file)
	if c.Store.Valkey.Password != "file-pw" || c.Admin.Token != "from-file" {
		t.Errorf("file values: %+v %+v", c.Store.Valkey, c.Admin)
	}
	// A bad env value is reported at its key path.
	_, err := Load(writeFile(t, base), []string{"IDEMGATE_UPSTREAM_TIMEOUT=soon", "IDEMGATE_STORE_DRIVER=redis"})
	for _, want := range []string{"upstream.timeout: ", "store.driver: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad env: %v, want %s", err, want)
		}
	}
	if EnvName("store.valkey.key_prefix") != "IDEMGATE_STORE_VALKEY_KEY_PREFIX" {
		t.Errorf("EnvName = %s", EnvName("store.valkey.key_prefix"))
	}
}

func TestInheritance(t *testing.T) {
	c := mustParse(t, base+`
defaults:
  owner: "header:X-User"
  lease: 3s
  retention: 0
  replay_statuses: ["2xx", 409]
  fingerprint: {headers: [Content-Type, X-Tenant], query: false}
  max_request_bytes: 64KiB
routes:
  - name: a
    match: "POST /a"
    lease: 7s
    fingerprint: {body: json}
  - name: b
    match: "/b/"
    fingerprint: {query: true, headers: []}
    owner: authorization
    replay_statuses: [201]
`)
	d := c.Policy.Defaults()
	if d.Lease != 3*time.Second || d.Retention != 0 || d.Owner.Header != "X-User" || d.Fingerprint.Query || d.MaxRequestBytes != 64<<10 {
		t.Errorf("defaults = %+v", d)
	}
	if d.WaitTimeout != 10*time.Second || d.Header != "Idempotency-Key" || d.Concurrent != policy.ConcurrentWait {
		t.Errorf("defaults lost built-in values: %+v", d)
	}
	a := route(t, c, "a")
	if a.Lease != 7*time.Second || a.Retention != 0 || a.Owner.Kind != policy.OwnerHeader || a.MaxRequestBytes != 64<<10 {
		t.Errorf("a = %+v", a)
	}
	if a.Fingerprint.Body != policy.BodyJSON || a.Fingerprint.Query || !slices.Equal(a.Fingerprint.Headers, []string{"content-type", "x-tenant"}) {
		t.Errorf("a fingerprint subfields did not inherit individually: %+v", a.Fingerprint)
	}
	if !slices.Equal(a.ReplayStatuses, []policy.StatusRange{{Min: 200, Max: 299}, {Min: 409, Max: 409}}) || !slices.Equal(a.Methods, []string{"POST"}) {
		t.Errorf("a = %+v", a)
	}
	b := route(t, c, "b")
	if b.Lease != 3*time.Second || b.Owner.Kind != policy.OwnerAuthorization || !b.Fingerprint.Query || len(b.Fingerprint.Headers) != 0 || b.Fingerprint.Body != policy.BodyRaw {
		t.Errorf("b = %+v", b)
	}
	if !slices.Equal(b.ReplayStatuses, []policy.StatusRange{{Min: 201, Max: 201}}) || !slices.Equal(b.Methods, []string{"POST", "PATCH"}) {
		t.Errorf("b = %+v", b)
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name, yaml, path, says string
	}{
		{"unknown top key", base + "listne: ':80'\n", "listne", "unknown key"},
		{"unknown nested key", base + "store: {valkey: {adress: x}}\n", "store.valkey.adress", "unknown key"},
		{"unknown route key", base + "routes: [{name: a, match: /a, leese: 1s}]\n", "routes[0].leese", "unknown key"},
		{"name in defaults", base + "defaults: {name: x}\n", "defaults.name", "unknown key"},
		{"wrong type", base + "defaults: {required: maybe}\n", "defaults.required", "bool"},
		{"listen", base + "listen: 8080\n", "listen", "host:port"},
		{"upstream scheme", "upstream: {url: 'ftp://x'}\n", "upstream.url", "http or https"},
		{"upstream relative", "upstream: {url: '/x'}\n", "upstream.url", "absolute"},
		{"upstream unparsable", "upstream: {url: 'http://[::1'}\n", "upstream.url", "absolute"},
		{"upstream timeout", "upstream: {url: 'http://x:1', timeout: -1s}\n", "upstream.timeout", "> 0"},
		{"upstream timeout syntax", "upstream: {url: 'http://x:1', timeout: 60}\n", "upstream.timeout", "not a duration"},
		{"admin listen", base + "admin: {listen: nowhere}\n", "admin.listen", "host:port"},
		{"driver", base + "store: {driver: redis}\n", "store.driver", "memory, valkey, bolt or postgres"},
		{"valkey addrs", base + "store: {driver: valkey}\n", "store.valkey.addrs", "at least one"},
		{"valkey addr", base + "store: {driver: valkey, valkey: {addrs: [localhost]}}\n", "store.valkey.addrs[0]", "host:port"},
		{"bolt path", base + "store: {driver: bolt, bolt: {path: ''}}\n", "store.bolt.path", "required"},
		{"log format", base + "log: {format: xml}\n", "log.format", "text or json"},
		{"log level", base + "log: {level: trace}\n", "log.level", "debug, info"},
		{"server duration", base + "server: {idle_timeout: -5s}\n", "server.idle_timeout", ">= 0"},
		{"server size", base + "server: {max_header_bytes: 0}\n", "server.max_header_bytes", "> 0"},
		{"write timeout", base + "server: {write_timeout: 30s}\n", "server.write_timeout", "exceed upstream.timeout"},
		{"route name syntax", base + "routes: [{name: Orders, match: /a}]\n", "routes[0].name", "^[a-z0-9-]+$"},
		{"route name missing", base + "routes: [{match: /a}]\n", "routes[0].name", "required"},
		{"route name reserved", base + "routes: [{name: default, match: /a}]\n", "routes[0].name", "reserved"},
		{"route name duplicate", base + "routes: [{name: a, match: /a}, {name: a, match: /b}]\n", "routes[1].name", "already"},
		{"match missing", base + "routes: [{name: a}]\n", "routes[0].match", "required"},
		{"match invalid", base + "routes: [{name: a, match: '/a/{'}]\n", "routes[0].match", "invalid pattern"},
		{"match conflict", base + "routes: [{name: a, match: '/x/{id}'}, {name: b, match: '/{y}/z'}]\n", "routes[1].match", "conflicts with routes[0] (a)"},
		{"match method", base + "routes: [{name: a, match: 'DELETE /a'}]\n", "routes[0].match", "DELETE is not among methods"},
		{"mode", base + "routes: [{name: a, match: /a, mode: off}]\n", "routes[0].mode", "enforce or passthrough"},
		{"header", base + "defaults: {header: 'Idem Key'}\n", "defaults.header", "valid field name"},
		{"methods empty", base + "defaults: {methods: []}\n", "defaults.methods", "at least one"},
		{"methods token", base + "routes: [{name: a, match: /a, methods: ['PO ST']}]\n", "routes[0].methods", "valid method"},
		{"owner source", base + "defaults: {owner: ip}\n", "defaults.owner", "unknown owner source"},
		{"owner header name", base + "defaults: {owner: 'header:'}\n", "defaults.owner", "valid field name"},
		{"owner none", base + "routes: [{name: a, match: /a, owner: none}]\n", "routes[0].owner", "allow_global_keys"},
		{"owner none in defaults", base + "defaults: {owner: none}\n", "defaults.owner", "allow_global_keys"},
		{"allow withdrawn", base + "defaults: {owner: none, allow_global_keys: true}\nroutes: [{name: a, match: /a, allow_global_keys: false}]\n", "routes[0].owner", "allow_global_keys"},
		{"fingerprint headers", base + "defaults: {fingerprint: {headers: ['a b']}}\n", "defaults.fingerprint.headers", "valid field name"},
		{"fingerprint body", base + "routes: [{name: a, match: /a, fingerprint: {body: xml}}]\n", "routes[0].fingerprint.body", "raw, json or ignore"},
		{"fingerprint query type", base + "defaults: {fingerprint: {query: sometimes}}\n", "defaults.fingerprint.query", "bool"},
		{"lease zero", base + "routes: [{name: a, match: /a, lease: 0s}]\n", "routes[0].lease", "> 0"},
		{"lease syntax", base + "routes: [{name: a, match: /a, lease: soon}]\n", "routes[0].lease", "not a duration"},
		{"retention", base + "defaults: {retention: -1h}\n", "defaults.retention", ">= 0"},
		{"concurrent", base + "defaults: {concurrent: queue}\n", "defaults.concurrent", "wait or conflict"},
		{"wait timeout zero", base + "defaults: {wait_timeout: 0s}\n", "defaults.wait_timeout", "> 0"},
		{"wait timeout over upstream", base + "routes: [{name: a, match: /a, wait_timeout: 2m}]\n", "routes[0].wait_timeout", "<= upstream.timeout"},
		{"statuses", base + "defaults: {replay_statuses: ['2xx', 700]}\n", "defaults.replay_statuses", "100..599"},
		{"statuses class", base + "routes: [{name: a, match: /a, replay_statuses: [6xx]}]\n", "routes[0].replay_statuses", "1xx..5xx"},
		{"statuses empty", base + "defaults: {replay_statuses: []}\n", "defaults.replay_statuses", "at least one"},
		{"size syntax", base + "defaults: {max_request_bytes: 1.5MiB}\n", "defaults.max_request_bytes", "fractions"},
		{"size zero", base + "routes: [{name: a, match: /a, max_response_bytes: 0}]\n", "routes[0].max_response_bytes", "> 0"},
		{"size unit", base + "defaults: {max_response_bytes: 1TiB}\n", "defaults.max_response_bytes", "unknown unit"},
		{"on_store_error", base + "defaults: {on_store_error: retry}\n", "defaults.on_store_error", "fail_closed or fail_open"},
		{"on_abandoned", base + "routes: [{name: a, match: /a, on_abandoned: wait}]\n", "routes[0].on_abandoned", "takeover or reject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tt.yaml), nil)
			if err == nil {
				t.Fatalf("Load accepted:\n%s", tt.yaml)
			}
			found := false
			for _, e := range unjoin(err) {
				var fe *policy.FieldError
				if errors.As(e, &fe) && fe.Path == tt.path && strings.Contains(fe.Err.Error(), tt.says) {
					found = true
				}
			}
			if !found {
				t.Fatalf("error does not name %s saying %q:\n%v", tt.path, tt.says, err)
			}
		})
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
listen: nowhere
bogus: 1
upstream: {url: 'ftp://x', timeout: 5s}
store: {driver: valkey}
log: {level: loud}
defaults:
  lease: -1s
  wait_timeout: 20s
  owner: none
routes:
  - name: Bad
    match: "/x/{"
    retention: forever
  - {name: b, match: "PUT /y", methods: [PUT]}
  - {name: c, match: "PUT /y", methods: [PUT], required: maybe}
`), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		"listen", "bogus", "upstream.url", "store.valkey.addrs", "log.level",
		"defaults.lease", "defaults.wait_timeout", "defaults.owner",
		"routes[0].name", "routes[0].match", "routes[0].retention", "routes[2].match", "routes[2].required",
	}
	var got []string
	for _, e := range unjoin(err) {
		var fe *policy.FieldError
		if !errors.As(e, &fe) {
			t.Errorf("problem without a key path: %v", e)
			continue
		}
		got = append(got, fe.Path)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing a problem at %s; got %v\n%v", w, got, err)
		}
	}
	// Inherited bad values are reported once, at their source.
	for _, p := range got {
		if strings.HasPrefix(p, "routes[") && (strings.HasSuffix(p, ".lease") || strings.HasSuffix(p, ".wait_timeout") || strings.HasSuffix(p, ".owner")) {
			t.Errorf("inherited problem reported again at %s", p)
		}
	}
	seen := map[string]bool{}
	for _, e := range unjoin(err) {
		if seen[e.Error()] {
			t.Errorf("problem reported twice: %v", e)
		}
		seen[e.Error()] = true
	}
}

func TestInvalidYAML(t *testing.T) {
	for _, data := range []string{"a: [\n", "- a\n- b\n", "a:\n\t- b\n"} {
		if _, err := Parse([]byte(data), nil); err == nil {
			t.Errorf("Parse(%q) accepted", data)
		}
	}
}

func TestSecretsStayOutOfErrors(t *testing.T) {
	for _, u := range []string{"ftp://user:hunter2@x", "http://user:hunter2@[::1", "user:hunter2@host"} {
		_, err := Load(writeFile(t, "upstream: {url: '"+u+"'}\nstore: {driver: valkey, valkey: {password: hunter2}}\n"), nil)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks a secret or is nil: %v", err)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{"512": 512, "0": 0, "64KiB": 64 << 10, "1MiB": 1 << 20, "1GiB": 1 << 30, "1 MiB": 1 << 20,
		"10MB": 10_000_000, "2KB": 2000, "1gb": 1_000_000_000, "7B": 7, " 3kib ": 3 << 10}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "1TiB", "1 M", "9223372036854775807KiB", "99999999999999999999", "1e6"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d; want an error", in, got)
		}
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(base))
	f.Add([]byte("routes: [{name: a, match: '/a/{'}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, []string{"IDEMGATE_ADMIN_TOKEN=t"})
		if err != nil {
			return
		}
		if c.Policy == nil || c.Upstream.URL == nil {
			t.Fatalf("accepted config without policy or upstream: %+v", c)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted a config that Validate rejects: %v", err)
		}
	})
}
