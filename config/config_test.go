package config

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
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
	if !slices.Equal(names, []string{"create-order", "capture-payment", "refunds", "uploads", "invoices", "stripe-webhooks", "github-webhooks", "default"}) {
		t.Errorf("routes = %v", names)
	}
	if r := route(t, c, "invoices"); r.Upstream == nil || r.Upstream.String() != "http://127.0.0.1:3001" || r.Scope != "upstream:127.0.0.1:3001" {
		t.Errorf("invoices upstream %v scope %q", r.Upstream, r.Scope)
	}
	if r := route(t, c, "create-order"); !r.Required || !slices.Equal(r.Methods, []string{"POST"}) {
		t.Errorf("create-order = %+v", r)
	}
	if r := route(t, c, "capture-payment"); r.Fingerprint.Body != fingerprint.BodyJSON || !r.Fingerprint.Query || !slices.Equal(r.Fingerprint.Headers, []string{"content-type"}) {
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
	// The keys the decoder knows: the top-level ones, and a route's (its
	// settings are those of defaults), each section by name too.
	keys := keyPaths(reflect.TypeFor[rawConfig](), "")
	for _, k := range keyPaths(reflect.TypeFor[rawRoute](), "") {
		keys = append(keys, k)
		if section, _, ok := strings.Cut(k, "."); ok {
			keys = append(keys, section)
		}
	}
	for _, k := range keys {
		leaf := k[strings.LastIndex(k, ".")+1:]
		found := false
		for _, line := range strings.Split(text, "\n") {
			// A key left out on purpose (its default follows the
			// machine or another key) is shown commented out: "# key: ".
			trimmed := strings.TrimLeft(strings.TrimLeft(line, " "), "- ")
			if (strings.HasPrefix(trimmed, leaf+":") || strings.HasPrefix(trimmed, "# "+leaf+":")) && strings.Contains(line, "#") {
				found = true
			}
		}
		if leaf == "jwks_file" {
			// The alternative to jwks_url: exactly one may be set, so the
			// example shows it in the comment of jwks_url.
			found = strings.Contains(text, "# the issuer's JWK Set, cached; or jwks_file: ")
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
  unknown_statuses: [502, 504]
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
    unknown_statuses: []
`)
	d := c.Policy.Defaults()
	if d.Lease != 3*time.Second || d.Retention != 0 || d.Owner.Header != "X-User" || d.Fingerprint.Query || d.MaxRequestBytes != 64<<10 {
		t.Errorf("defaults = %+v", d)
	}
	if d.WaitTimeout != 10*time.Second || d.Header != "Idempotency-Key" || d.Concurrent != policy.ConcurrentWait {
		t.Errorf("defaults lost built-in values: %+v", d)
	}
	a := route(t, c, "a")
	if a.Lease != 7*time.Second || a.Retention != 0 || a.Owner.Kind != identity.OwnerHeader || a.MaxRequestBytes != 64<<10 {
		t.Errorf("a = %+v", a)
	}
	if a.Fingerprint.Body != fingerprint.BodyJSON || a.Fingerprint.Query || !slices.Equal(a.Fingerprint.Headers, []string{"content-type", "x-tenant"}) {
		t.Errorf("a fingerprint subfields did not inherit individually: %+v", a.Fingerprint)
	}
	if !slices.Equal(a.ReplayStatuses, []policy.StatusRange{{Min: 200, Max: 299}, {Min: 409, Max: 409}}) || !slices.Equal(a.Methods, []string{"POST"}) {
		t.Errorf("a = %+v", a)
	}
	if !slices.Equal(a.UnknownStatuses, []policy.StatusRange{{Min: 502, Max: 502}, {Min: 504, Max: 504}}) || !a.OutcomeUnknown(504) || a.OutcomeUnknown(503) {
		t.Errorf("a did not inherit unknown_statuses: %v", a.UnknownStatuses)
	}
	b := route(t, c, "b")
	if b.Lease != 3*time.Second || b.Owner.Kind != identity.OwnerAuthorization || !b.Fingerprint.Query || len(b.Fingerprint.Headers) != 0 || b.Fingerprint.Body != fingerprint.BodyRaw {
		t.Errorf("b = %+v", b)
	}
	if !slices.Equal(b.ReplayStatuses, []policy.StatusRange{{Min: 201, Max: 201}}) || !slices.Equal(b.Methods, []string{"POST", "PATCH"}) {
		t.Errorf("b = %+v", b)
	}
	if len(b.UnknownStatuses) != 0 || b.OutcomeUnknown(504) {
		t.Errorf("b's unknown_statuses: [] kept the defaults': %v", b.UnknownStatuses)
	}
}

// TestJWTSection: a route inherits the defaults' jwt: section key by key,
// jwks_file and jwks_url replace each other, claims default to iss and sub,
// and a route that picks another owner drops the inherited section.
func TestJWTSection(t *testing.T) {
	c := mustParse(t, base+`
defaults:
  owner: jwt
  jwt:
    jwks_file: /etc/idemgate/jwks.json
    issuers: ["https://issuer.example"]
    audiences: [orders-api]
routes:
  - name: orders
    match: /v1/orders
    scope: orders # other claims than the defaults': owners of one form, kept apart
    jwt:
      jwks_url: https://issuer.example/.well-known/jwks.json
      claims: [sub, tenant]
  - name: legacy
    match: /v1/legacy
    owner: authorization
`)
	d := c.Policy.Defaults()
	want := identity.JWTSettings{JWKSFile: "/etc/idemgate/jwks.json", Issuers: []string{"https://issuer.example"},
		Audiences: []string{"orders-api"}, Claims: []string{"iss", "sub"}}
	if d.Owner.Kind != identity.OwnerJWT || d.JWT == nil || !jwtEqual(*d.JWT, want) {
		t.Errorf("defaults jwt = %+v", d.JWT)
	}
	o := route(t, c, "orders")
	want.JWKSFile, want.JWKSURL, want.Claims = "", "https://issuer.example/.well-known/jwks.json", []string{"sub", "tenant"}
	if o.Owner.Kind != identity.OwnerJWT || o.JWT == nil || !jwtEqual(*o.JWT, want) {
		t.Errorf("orders jwt = %+v", o.JWT)
	}
	if l := route(t, c, "legacy"); l.Owner.Kind != identity.OwnerAuthorization || l.JWT != nil {
		t.Errorf("legacy = %v %+v", l.Owner, l.JWT)
	}
	var buf bytes.Buffer
	if err := c.Policy.Describe(&buf); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		`jwt: {jwks_url: "https://issuer.example/.well-known/jwks.json", issuers: ["https://issuer.example"], audiences: ["orders-api"], claims: ["sub", "tenant"]}`,
		`owner: "authorization" # a refreshed or rotated token is a new owner, so a retry after a token refresh runs again`,
	} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("Describe lacks %q:\n%s", w, buf.String())
		}
	}
}

func jwtEqual(a, b identity.JWTSettings) bool {
	return a.JWKSFile == b.JWKSFile && a.JWKSURL == b.JWKSURL && slices.Equal(a.Issuers, b.Issuers) &&
		slices.Equal(a.Audiences, b.Audiences) && slices.Equal(a.Claims, b.Claims)
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
		{"upstream scheme", "upstream: {url: 'ftp://x'}\n", "upstream.url", "http, https or h2c"},
		{"upstream relative", "upstream: {url: '/x'}\n", "upstream.url", "absolute"},
		{"upstream unparsable", "upstream: {url: 'http://[::1'}\n", "upstream.url", "absolute"},
		{"upstream timeout", "upstream: {url: 'http://x:1', timeout: -1s}\n", "upstream.timeout", "> 0"},
		{"upstream timeout syntax", "upstream: {url: 'http://x:1', timeout: 60}\n", "upstream.timeout", "not a duration"},
		{"admin listen", base + "admin: {listen: nowhere}\n", "admin.listen", "host:port"},
		{"driver", base + "store: {driver: redis}\n", "store.driver", "memory, valkey, bolt or postgres"},
		{"valkey addrs", base + "store: {driver: valkey}\n", "store.valkey.addrs", "at least one"},
		{"valkey addr", base + "store: {driver: valkey, valkey: {addrs: [localhost]}}\n", "store.valkey.addrs[0]", "host:port"},
		{"bolt path", base + "store: {driver: bolt, bolt: {path: ''}}\n", "store.bolt.path", "required"},
		{"acks replicas", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {replicas: -1}}}\n", "store.valkey.acks.replicas", "between 0 (off) and 64"},
		{"acks replicas type", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {replicas: one}}}\n", "store.valkey.acks.replicas", "int"},
		{"acks timeout zero", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {replicas: 1, timeout: 0s}}}\n", "store.valkey.acks.timeout", "between 1ms and 1.5s"},
		{"acks timeout long", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {aof_local: true, timeout: 2s}}}\n", "store.valkey.acks.timeout", "between 1ms and 1.5s"},
		{"acks timeout syntax", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {replicas: 1, timeout: 500}}}\n", "store.valkey.acks.timeout", "not a duration"},
		{"acks unknown", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {replica: 1}}}\n", "store.valkey.acks.replica", "unknown key"},
		{"cache bytes negative", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], cache_bytes: -1}}\n", "store.valkey.cache_bytes", "not a byte size"},
		{"cache bytes unit", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], cache_bytes: 32MiBs}}\n", "store.valkey.cache_bytes", "unknown unit"},
		{"valkey layout", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], layout: 6}}\n", "store.valkey.layout", "must be 3, 4 or 5"},
		{"flush delay negative", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], max_flush_delay: -1us}}\n", "store.valkey.max_flush_delay", "between 0 (off) and 1ms"},
		{"flush delay too long", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], max_flush_delay: 2ms}}\n", "store.valkey.max_flush_delay", "between 0 (off) and 1ms"},
		{"flush delay unit", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], max_flush_delay: 50}}\n", "store.valkey.max_flush_delay", "not a duration"},
		{"connections not a power of two", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], connections: 3}}\n", "store.valkey.connections", "power of two from 1 to 256"},
		{"connections zero", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], connections: 0}}\n", "store.valkey.connections", "power of two from 1 to 256"},
		{"connections too many", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], connections: 512}}\n", "store.valkey.connections", "power of two from 1 to 256"},
		{"valkey layout type", base + "store: {driver: valkey, valkey: {addrs: ['h:1'], layout: four}}\n", "store.valkey.layout", "int"},
		{"log format", base + "log: {format: xml}\n", "log.format", "text or json"},
		{"log level", base + "log: {level: trace}\n", "log.level", "debug, info"},
		{"server duration", base + "server: {idle_timeout: -5s}\n", "server.idle_timeout", ">= 0"},
		{"server size", base + "server: {max_header_bytes: 0}\n", "server.max_header_bytes", "> 0"},
		{"write timeout", base + "server: {write_timeout: 30s}\n", "server.write_timeout", "exceed upstream.timeout"},
		{"shutdown timeout under upstream", base + "server: {shutdown_timeout: 30s}\n", "server.shutdown_timeout", "must exceed upstream.timeout (1m0s)"},
		{"shutdown timeout equal to upstream", "upstream: {url: 'http://x:1', timeout: 20s}\nserver: {shutdown_timeout: 20s}\n", "server.shutdown_timeout", "must exceed upstream.timeout (20s)"},
		{"upstream timeout over shutdown", "upstream: {url: 'http://x:1', timeout: 2m}\nserver: {shutdown_timeout: 90s}\ndefaults: {wait_timeout: 10s}\n", "server.shutdown_timeout", "must exceed upstream.timeout (2m0s)"},
		{"shutdown timeout without the store margin", "upstream: {url: 'http://x:1', timeout: 4s}\nserver: {shutdown_timeout: 4500ms}\ndefaults: {wait_timeout: 4s}\n", "server.shutdown_timeout", "must exceed upstream.timeout (4s) by at least 5s"},
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
		{"fingerprint body", base + "routes: [{name: a, match: /a, fingerprint: {body: xml}}]\n", "routes[0].fingerprint.body", "raw, json, protobuf or ignore"},
		{"problems docs url", base + "problems: {docs_url: 'docs/idempotency'}\n", "problems.docs_url", "absolute http or https URL"},
		{"problems type base slash", base + "problems: {type_base: 'https://api.example.com/problems'}\n", "problems.type_base", "must end in / or #"},
		{"fingerprint media types", base + "routes: [{name: a, match: /a, fingerprint: {media_types: loose}}]\n", "routes[0].fingerprint.media_types", "exact or normalize"},
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
		{"unknown statuses bad", base + "defaults: {unknown_statuses: [5x4]}\n", "defaults.unknown_statuses", "1xx..5xx"},
		{"unknown statuses replayed", base + "routes: [{name: a, match: /a, unknown_statuses: [201]}]\n", "routes[0].unknown_statuses", "also in replay_statuses"},
		{"unknown statuses informational", base + "defaults: {unknown_statuses: [1xx]}\n", "defaults.unknown_statuses", "informational"},
		{"size syntax", base + "defaults: {max_request_bytes: 1.5MiB}\n", "defaults.max_request_bytes", "fractions"},
		{"size zero", base + "routes: [{name: a, match: /a, max_response_bytes: 0}]\n", "routes[0].max_response_bytes", "> 0"},
		{"size unit", base + "defaults: {max_response_bytes: 1TiB}\n", "defaults.max_response_bytes", "unknown unit"},
		{"on_store_error", base + "defaults: {on_store_error: retry}\n", "defaults.on_store_error", "fail_closed or fail_open"},
		{"on_abandoned", base + "routes: [{name: a, match: /a, on_abandoned: wait}]\n", "routes[0].on_abandoned", "takeover or reject"},
		{"jwt without owner jwt", base + "defaults: {jwt: {jwks_url: 'https://i.test/jwks', issuers: [x]}}\n", "defaults.jwt", "only with owner: jwt"},
		{"route jwt without owner jwt", base + "routes: [{name: a, match: /a, owner: 'header:X-User', jwt: {jwks_file: /j, issuers: [x]}}]\n", "routes[0].jwt", "only with owner: jwt"},
		{"owner jwt without jwt", base + "routes: [{name: a, match: /a, owner: jwt}]\n", "routes[0].jwt", "is required with owner: jwt"},
		{"jwt both sources", base + "defaults: {owner: jwt, jwt: {jwks_file: /j, jwks_url: 'https://i.test/jwks', issuers: [x]}}\n", "defaults.jwt", "not both"},
		{"jwt no source", base + "defaults: {owner: jwt, jwt: {issuers: [x]}}\n", "defaults.jwt", "needs jwks_file or jwks_url"},
		{"jwt url relative", base + "defaults: {owner: jwt, jwt: {jwks_url: /jwks.json, issuers: [x]}}\n", "defaults.jwt.jwks_url", "absolute http or https"},
		{"jwt url scheme", base + "defaults: {owner: jwt, jwt: {jwks_url: 'file:///etc/jwks.json', issuers: [x]}}\n", "defaults.jwt.jwks_url", "absolute http or https"},
		{"jwt issuers missing", base + "defaults: {owner: jwt, jwt: {jwks_file: /j}}\n", "defaults.jwt.issuers", "at least one"},
		{"jwt issuers empty", base + "routes: [{name: a, match: /a, owner: jwt, jwt: {jwks_file: /j, issuers: []}}]\n", "routes[0].jwt.issuers", "at least one"},
		{"jwt claims empty", base + "defaults: {owner: jwt, jwt: {jwks_file: /j, issuers: [x], claims: []}}\n", "defaults.jwt.claims", "at least one"},
		{"jwt audience empty", base + "defaults: {owner: jwt, jwt: {jwks_file: /j, issuers: [x], audiences: ['']}}\n", "defaults.jwt.audiences", "empty"},
		{"jwt unknown key", base + "defaults: {owner: jwt, jwt: {jwks_uri: 'https://i.test/jwks', issuers: [x]}}\n", "defaults.jwt.jwks_uri", "unknown key"},
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

// TestShutdownTimeoutDefault: unset, server.shutdown_timeout follows
// upstream.timeout (plus ShutdownMargin), wherever upstream.timeout came
// from; set, it stands; 0 (no limit) is accepted.
func TestShutdownTimeoutDefault(t *testing.T) {
	if got := Default().Server.ShutdownTimeout; got != time.Minute+ShutdownMargin {
		t.Errorf("Default shutdown_timeout = %v, want upstream.timeout 1m + %v", got, ShutdownMargin)
	}
	tests := []struct {
		name, yaml string
		env        []string
		overrides  map[string]string
		want       time.Duration
	}{
		{"defaults", base, nil, nil, 65 * time.Second},
		{"upstream timeout in the file", "upstream: {url: 'http://x:1', timeout: 2m}\n", nil, nil, 2*time.Minute + ShutdownMargin},
		{"upstream timeout from the environment", base, []string{"IDEMGATE_UPSTREAM_TIMEOUT=15s"}, nil, 15*time.Second + ShutdownMargin},
		{"upstream timeout overridden", base, nil, map[string]string{"upstream.timeout": "12s"}, 12*time.Second + ShutdownMargin},
		{"set in the file", "upstream: {url: 'http://x:1', timeout: 20s}\nserver: {shutdown_timeout: 25s}\n", nil, nil, 25 * time.Second},
		{"no limit", base + "server: {shutdown_timeout: 0s}\n", nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := tt.yaml
			if !strings.Contains(yaml, "wait_timeout") {
				yaml += "defaults: {wait_timeout: 10s}\n"
			}
			c, err := Load(writeFile(t, yaml), tt.env, WithOverrides(tt.overrides))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.Server.ShutdownTimeout != tt.want {
				t.Errorf("shutdown_timeout = %v, want %v", c.Server.ShutdownTimeout, tt.want)
			}
		})
	}
	// Built by hand: Validate names both keys.
	c := Default()
	c.Upstream.URL, _ = url.Parse("http://127.0.0.1:3000")
	c.Server.ShutdownTimeout = 30 * time.Second
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "server.shutdown_timeout: 30s must exceed upstream.timeout (1m0s)") {
		t.Errorf("Validate = %v, want server.shutdown_timeout named with upstream.timeout", err)
	}
}

// TestOverrides: the merge order is override (flag) > environment > file >
// built-in default, for every kind of value, and each override is checked
// like the key it sets.
func TestOverrides(t *testing.T) {
	file := "listen: '127.0.0.1:1001'\nupstream: {url: 'http://file:1'}\nlog: {level: warn}\nstore:\n  driver: valkey\n  valkey: {addrs: ['file:6379']}\n"
	env := []string{
		"IDEMGATE_LISTEN=127.0.0.1:1002",
		"IDEMGATE_UPSTREAM_URL=http://env:2",
		"IDEMGATE_STORE_VALKEY_ADDRS=env:6379",
		"IDEMGATE_LOG_FORMAT=json",
	}
	overrides := map[string]string{
		"upstream.url":       "http://flag:3",
		"store.valkey.addrs": "flag-a:6379, flag-b:6379",
		"admin.listen":       "127.0.0.1:1003",
	}
	path := writeFile(t, file)
	c, err := Load(path, env, WithOverrides(overrides))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	checks := []struct{ key, got, want string }{
		{"upstream.url (file, env, flag)", c.Upstream.URL.String(), "http://flag:3"},
		{"store.valkey.addrs (file, env, flag)", strings.Join(c.Store.Valkey.Addrs, ","), "flag-a:6379,flag-b:6379"},
		{"listen (file, env)", c.Listen, "127.0.0.1:1002"},
		{"log.format (env)", c.Log.Format, "json"},
		{"log.level (file)", c.Log.Level, "warn"},
		{"admin.listen (flag)", c.Admin.Listen, "127.0.0.1:1003"},
		{"store.driver (file)", c.Store.Driver, DriverValkey},
		{"idle timeout (default)", c.Server.IdleTimeout.String(), "2m0s"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %q, want %q", ch.key, ch.got, ch.want)
		}
	}
	// Without the override the environment wins, without both the file.
	if c, err := Load(path, env); err != nil || c.Upstream.URL.String() != "http://env:2" {
		t.Errorf("without overrides: %v %v, want the environment's upstream", c, err)
	}
	if c, err := Load(path, nil); err != nil || c.Upstream.URL.String() != "http://file:1" {
		t.Errorf("without env and overrides: %v %v, want the file's upstream", c, err)
	}
	// No file: an override supplies the required upstream.url.
	c, err = Load("", nil, WithOverrides(map[string]string{"upstream.url": "http://flag:3"}))
	if err != nil || c.Upstream.URL.String() != "http://flag:3" || c.Validate() != nil {
		t.Errorf("no file, upstream overridden: %v %v", c, err)
	}
	// A file without upstream.url loads with the override (a reload of
	// `serve --config F --upstream U` relies on it).
	if _, err := Load(writeFile(t, "log: {level: debug}\n"), nil, WithOverrides(map[string]string{"upstream.url": "http://flag:3"})); err != nil {
		t.Errorf("file without upstream.url plus the override: %v", err)
	}
	// Bad values and keys are reported at their key path.
	_, err = Load(path, nil, WithOverrides(map[string]string{
		"upstream.url": "not a url", "log.level": "loud", "routes": "x", "defaults.lease": "1s", "nope": "1",
	}))
	for _, want := range []string{"upstream.url: ", "log.level: ", "routes: cannot be overridden", "defaults.lease: cannot be overridden", "nope: cannot be overridden"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad overrides: %v, want %q", err, want)
		}
	}
	// Parse takes the same options; the caller's map is left alone.
	ov := map[string]string{"log.level": "error"}
	pc, err := Parse([]byte(file), env, WithOverrides(ov))
	if err != nil || pc.Log.Level != "error" || len(ov) != 1 {
		t.Errorf("Parse with overrides: %v %v %v", pc, err, ov)
	}
}

func TestValkeyAcks(t *testing.T) {
	c := mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n")
	if c.Store.Valkey.Acks != (AcksConfig{Timeout: 500 * time.Millisecond}) || c.Store.Valkey.Acks.On() {
		t.Fatalf("default acks = %+v, want off with timeout 500ms", c.Store.Valkey.Acks)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {replicas: 2, aof_local: true, timeout: 250ms}}}\n")
	if c.Store.Valkey.Acks != (AcksConfig{Replicas: 2, AOFLocal: true, Timeout: 250 * time.Millisecond}) {
		t.Fatalf("acks = %+v", c.Store.Valkey.Acks)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n",
		"IDEMGATE_STORE_VALKEY_ACKS_REPLICAS=1", "IDEMGATE_STORE_VALKEY_ACKS_AOF_LOCAL=true", "IDEMGATE_STORE_VALKEY_ACKS_TIMEOUT=1s")
	if c.Store.Valkey.Acks != (AcksConfig{Replicas: 1, AOFLocal: true, Timeout: time.Second}) {
		t.Fatalf("acks from the environment = %+v", c.Store.Valkey.Acks)
	}
	// Off, the timeout is not checked.
	mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], acks: {timeout: 0s}}}\n")
}

func TestValkeyCacheBytes(t *testing.T) {
	c := mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n")
	if c.Store.Valkey.CacheBytes != 32<<20 {
		t.Fatalf("default cache_bytes = %d, want 32 MiB", c.Store.Valkey.CacheBytes)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], cache_bytes: 0}}\n")
	if c.Store.Valkey.CacheBytes != 0 {
		t.Fatalf("cache_bytes 0 = %d, want off", c.Store.Valkey.CacheBytes)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n", "IDEMGATE_STORE_VALKEY_CACHE_BYTES=8MiB")
	if c.Store.Valkey.CacheBytes != 8<<20 {
		t.Fatalf("cache_bytes from the environment = %d, want 8 MiB", c.Store.Valkey.CacheBytes)
	}
	c.Store.Valkey.CacheBytes = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "store.valkey.cache_bytes") {
		t.Fatalf("Validate with cache_bytes -1: %v", err)
	}
}

// TestValkeyMaxFlushDelay: store.valkey.max_flush_delay is off unless
// set, from the file or the environment.
func TestValkeyMaxFlushDelay(t *testing.T) {
	c := mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n")
	if c.Store.Valkey.MaxFlushDelay != 0 {
		t.Fatalf("default max_flush_delay = %v, want 0 (off)", c.Store.Valkey.MaxFlushDelay)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], max_flush_delay: 1ms}}\n")
	if c.Store.Valkey.MaxFlushDelay != time.Millisecond {
		t.Fatalf("max_flush_delay 1ms = %v", c.Store.Valkey.MaxFlushDelay)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n", "IDEMGATE_STORE_VALKEY_MAX_FLUSH_DELAY=20us")
	if c.Store.Valkey.MaxFlushDelay != 20*time.Microsecond {
		t.Fatalf("max_flush_delay from the environment = %v, want 20µs", c.Store.Valkey.MaxFlushDelay)
	}
}

// TestValkeyConnections: store.valkey.connections is one per server
// unless set, from the file or the environment.
func TestValkeyConnections(t *testing.T) {
	c := mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n")
	if c.Store.Valkey.Connections != 1 {
		t.Fatalf("default connections = %d, want 1", c.Store.Valkey.Connections)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], connections: 4}}\n")
	if c.Store.Valkey.Connections != 4 {
		t.Fatalf("connections 4 = %d", c.Store.Valkey.Connections)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n", "IDEMGATE_STORE_VALKEY_CONNECTIONS=2")
	if c.Store.Valkey.Connections != 2 {
		t.Fatalf("connections from the environment = %d, want 2", c.Store.Valkey.Connections)
	}
}

// TestValkeyLayout: store.valkey.layout defaults to 3, the layout every
// build reads; 4 is taken from the file or the environment.
func TestValkeyLayout(t *testing.T) {
	c := mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n")
	if c.Store.Valkey.Layout != 3 {
		t.Fatalf("default layout = %d, want 3", c.Store.Valkey.Layout)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], layout: 4}}\n")
	if c.Store.Valkey.Layout != 4 {
		t.Fatalf("layout 4 = %d", c.Store.Valkey.Layout)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1']}}\n", "IDEMGATE_STORE_VALKEY_LAYOUT=4")
	if c.Store.Valkey.Layout != 4 {
		t.Fatalf("layout from the environment = %d, want 4", c.Store.Valkey.Layout)
	}
	c = mustParse(t, base+"store: {driver: valkey, valkey: {addrs: ['h:1'], layout: 5}}\n")
	if c.Store.Valkey.Layout != 5 {
		t.Fatalf("layout 5 = %d", c.Store.Valkey.Layout)
	}
}

// TestOwnerList: owner takes one source or a list of them (one credential
// acting for many accounts is one principal per account); a list of one is
// that source; validate explains what is wrong at the route's owner key.
func TestOwnerList(t *testing.T) {
	c := mustParse(t, base+`
defaults:
  owner: authorization
routes:
  - name: charges
    match: "POST /v1/charges"
    owner: [authorization, "header:Stripe-Account"]
  - name: refunds
    match: "POST /v1/refunds"
    owner: [authorization]
    scope: refunds
`)
	if got := route(t, c, "charges").Owner.String(); got != "[authorization, header:Stripe-Account]" {
		t.Errorf("charges owner = %s", got)
	}
	if got := route(t, c, "refunds").Owner; got.Kind != identity.OwnerAuthorization {
		t.Errorf("a list of one = %+v, want authorization itself", got)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"none in a list", "defaults: {owner: [authorization, none]}\n", "none cannot be part of an owner list"},
		{"twice", "defaults: {owner: [authorization, authorization]}\n", "listed twice"},
		{"jwt without its section", "defaults: {owner: [jwt, \"header:Stripe-Account\"]}\n", "jwt"},
		{"two lists in one scope", "routes:\n  - {name: a, match: \"POST /a\", owner: [authorization, \"header:X-A\"]}\n  - {name: b, match: \"POST /b\", owner: [authorization, \"header:X-B\"]}\n", "shares scope"},
	} {
		_, err := Load(writeFile(t, base+tc.doc), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "owner") {
			t.Errorf("%s: %v, want an error at the owner key saying %q", tc.name, err, tc.want)
		}
	}
}

// TestExampleKeepsMachineDefaults: config.example.yaml copied as README
// says leaves server.max_waiters and server.shutdown_timeout to their
// rules (per CPU; upstream.timeout + ShutdownMargin) instead of fixing the
// values one machine size gets, so raising upstream.timeout or running on
// another CPU count keeps working.
func TestExampleKeepsMachineDefaults(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c, err := Load("../config.example.yaml", []string{"IDEMGATE_UPSTREAM_TIMEOUT=120s"})
	if err != nil {
		t.Fatalf("config.example.yaml with upstream.timeout 120s: %v", err)
	}
	if want := 120*time.Second + ShutdownMargin; c.Server.ShutdownTimeout != want {
		t.Errorf("shutdown_timeout = %v, want %v (upstream.timeout + margin)", c.Server.ShutdownTimeout, want)
	}
	if want := DefaultMaxWaiters(); c.Server.MaxWaiters != want {
		t.Errorf("max_waiters = %d on 1 CPU, want the default %d", c.Server.MaxWaiters, want)
	}
}

// TestInProcessV1LookupDefaultsOff: loaded for the engine in process, a
// configuration that does not set store.v1_lookup has it off (the
// middleware and Caddy never wrote layout 1, and their host-scoped keys
// would pay one more store read per fresh key for it); one that sets it
// keeps it; the proxy's default stays on.
func TestInProcessV1LookupDefaultsOff(t *testing.T) {
	for _, c := range []struct {
		name      string
		yaml      string
		inProcess bool
		want      bool
	}{
		{"proxy default", "upstream: {url: http://127.0.0.1:1}\n", false, true},
		{"in process default", "store: {driver: memory}\n", true, false},
		{"in process set", "store: {driver: memory, v1_lookup: true}\n", true, true},
	} {
		var opts []LoadOption
		if c.inProcess {
			opts = append(opts, InProcess())
		}
		cfg, err := Parse([]byte(c.yaml), nil, opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.Store.V1Lookup != c.want {
			t.Errorf("%s: store.v1_lookup %v, want %v", c.name, cfg.Store.V1Lookup, c.want)
		}
	}
}
