package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateExampleConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "--config", "../../config.example.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, route := range []string{"create-order", "capture-payment", "uploads", "default"} {
		if !strings.Contains(out.String(), route) {
			t.Errorf("effective policy lacks route %q:\n%s", route, out.String())
		}
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
