package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestValidateExampleConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "--config", "../../config.example.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, route := range []string{"create-order", "capture-payment", "refunds", "uploads", "default"} {
		if !strings.Contains(out.String(), route) {
			t.Errorf("effective policy lacks route %q:\n%s", route, out.String())
		}
	}
	for _, want := range []string{"a retry after a token refresh runs again", "Prefer\nowner: jwt", `jwt: {jwks_url: "https://issuer.example/.well-known/jwks.json"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out.String())
		}
	}
	// The example's jwks_url is a placeholder (.example never resolves):
	// validate says that route would refuse every token.
	if !strings.Contains(errOut.String(), "WARNING") || !strings.Contains(errOut.String(), "route refunds: jwt.jwks_url") {
		t.Errorf("validate does not warn about the placeholder jwks_url:\n%s", errOut.String())
	}
}

// TestValidateReadsJWKSFiles: validate reads every jwks_file as serve
// would, and reports one it cannot use at its key path.
func TestValidateReadsJWKSFiles(t *testing.T) {
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	path := filepath.Join(dir, "idemgate.yaml")
	cfg := `upstream: {url: "http://127.0.0.1:3000"}
defaults:
  owner: jwt
  jwt: {jwks_file: "` + jwks + `", issuers: ["https://issuer.example"]}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "defaults.jwt.jwks_file") {
		t.Fatalf("missing jwks_file: exit %d:\n%s", code, errOut.String())
	}
	doc := `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`
	if err := os.WriteFile(jwks, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"validate", "--config", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), `owner: "jwt"`) || strings.Contains(out.String(), "Note: owner: authorization") {
		t.Errorf("validate output:\n%s", out.String())
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `upstream: {url: "http://127.0.0.1:3000"}
defaults:
  lease: 0s
  colour: blue
routes:
  - name: Bad_Name
    match: "POST /x"
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	// UnmarshalExact stops at the unknown key; fix it and the rest shows at once.
	if !strings.Contains(errOut.String(), "colour") {
		t.Fatalf("unknown key not named:\n%s", errOut.String())
	}
	if err := os.WriteFile(path, []byte(strings.Replace(bad, "  colour: blue\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := run([]string{"validate", "--config", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, path := range []string{"defaults.lease", "routes[0].name"} {
		if !strings.Contains(errOut.String(), path) {
			t.Errorf("problem %s not reported:\n%s", path, errOut.String())
		}
	}
}

func TestCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "idemgate ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run([]string{"frobnicate"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown command exit %d, want 2", code)
	}
	if code := run(nil, &out, &errOut); code != 2 {
		t.Fatalf("no command exit %d, want 2", code)
	}
	if code := run([]string{"validate"}, &out, &errOut); code != 2 {
		t.Fatalf("validate without --config exit %d, want 2", code)
	}
	if code := run([]string{"serve", "--config", "/nonexistent/idemgate.yaml"}, &out, &errOut); code != 1 {
		t.Fatalf("serve with a missing file exit %d, want 1", code)
	}
}

func TestHealthcheck(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer sick.Close()
	var errOut bytes.Buffer
	if code := healthcheck([]string{"--url", healthy.URL}, &errOut); code != 0 {
		t.Fatalf("healthy: exit %d %s", code, errOut.String())
	}
	if code := healthcheck([]string{"--url", sick.URL}, &errOut); code != 1 {
		t.Fatalf("503: exit %d, want 1", code)
	}
	if code := healthcheck([]string{"--url", "http://127.0.0.1:1/healthz", "--timeout", "500ms"}, &errOut); code != 1 {
		t.Fatalf("unreachable: exit %d, want 1", code)
	}
}

func TestHelpExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"serve", "-h"}, {"demo", "-h"}, {"validate", "-h"}, {"healthcheck", "-h"}, {"help"}} {
		if code := run(args, &out, &errOut); code != 0 {
			t.Errorf("%v: exit %d, want 0", args, code)
		}
	}
	if !strings.Contains(errOut.String(), "-bolt-path") {
		t.Errorf("serve -h does not list --bolt-path:\n%s", errOut.String())
	}
}

// TestConfigLoader: every serve flag overrides its key over the file and
// the environment, a file may leave out what a flag supplies, and the same
// loader (used for the start and for every reload) gives the same result
// each time it is called.
func TestConfigLoader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	file := `listen: "127.0.0.1:1001"
admin: {listen: "127.0.0.1:1002"}
log: {format: text, level: info}
store: {driver: memory, bolt: {path: /file.db}}
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"IDEMGATE_LISTEN=127.0.0.1:2001", "IDEMGATE_LOG_LEVEL=warn", "IDEMGATE_UPSTREAM_URL=http://env:1"}
	f := serveFlags{config: path, upstream: "http://flag:1", listen: "127.0.0.1:3001", adminListen: "127.0.0.1:3002",
		storeDriver: "valkey", valkeyAddrs: "a:6379,b:6379", boltPath: "/flag.db", logFormat: "json", logLevel: "debug", h2c: true}
	load := configLoader(f, env)
	for i := 0; i < 2; i++ { // the start, then a reload
		c, err := load(path)
		if err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		got := []string{c.Upstream.URL.String(), c.Listen, c.Admin.Listen, c.Store.Driver, strings.Join(c.Store.Valkey.Addrs, ","),
			c.Store.Bolt.Path, c.Log.Format, c.Log.Level, strconv.FormatBool(c.Server.H2C)}
		want := []string{"http://flag:1", "127.0.0.1:3001", "127.0.0.1:3002", "valkey", "a:6379,b:6379", "/flag.db", "json", "debug", "true"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("load %d: %q, want %q", i, got, want)
		}
	}
	// Without flags the environment wins over the file.
	c, err := configLoader(serveFlags{config: path}, env)(path)
	if err != nil || c.Listen != "127.0.0.1:2001" || c.Log.Level != "warn" || c.Upstream.URL.String() != "http://env:1" {
		t.Errorf("without flags: %+v %v", c, err)
	}
	// No file and no --upstream: the missing upstream.url is reported.
	if _, err := configLoader(serveFlags{}, nil)(""); err == nil || !strings.Contains(err.Error(), "upstream.url") {
		t.Errorf("no file, no upstream: %v, want upstream.url required", err)
	}
	// A bad flag value is named by the key it overrides.
	if _, err := configLoader(serveFlags{upstream: "ftp://x"}, nil)(""); err == nil || !strings.Contains(err.Error(), "upstream.url") {
		t.Errorf("--upstream ftp://x: %v, want an upstream.url error", err)
	}
}

// TestValidateWarnsSharedHostScope: without upstream.pass_host, routes that
// name no host share one key scope across client Hosts; validate says so
// (a warning: exit 0) and names the routes, and stays quiet once pass_host
// or a host pattern separates the hosts.
func TestValidateWarnsSharedHostScope(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, cfg string
		warn      string // "" for no warning
	}{
		{"shared", "upstream: {url: \"http://127.0.0.1:3000\"}\nroutes:\n  - {name: orders, match: \"POST /v1/orders\"}\n", "routes orders, default (no host in their match)"},
		{"pass_host", "upstream: {url: \"http://127.0.0.1:3000\", pass_host: true}\nroutes:\n  - {name: orders, match: \"POST /v1/orders\"}\n", ""},
		{"host patterns", "upstream: {url: \"http://127.0.0.1:3000\"}\ndefaults: {mode: passthrough}\nroutes:\n  - {name: t1, match: \"POST t1.example/v1/orders\", mode: enforce}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if code := run([]string{"validate", "--config", path}, &out, &errOut); code != 0 {
				t.Fatalf("exit %d, want 0 (a warning is no error):\n%s", code, errOut.String())
			}
			got := errOut.String()
			if tc.warn == "" {
				if strings.Contains(got, "pass_host") {
					t.Errorf("unexpected shared-scope warning:\n%s", got)
				}
				return
			}
			for _, want := range []string{"WARNING", tc.warn, "one shared key scope", "Host or X-Forwarded-Host", "upstream.pass_host: true"} {
				if !strings.Contains(got, want) {
					t.Errorf("validate stderr lacks %q:\n%s", want, got)
				}
			}
		})
	}
}
