package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config/fromopenapi"
)

const fromOpenAPITestdata = "../../config/fromopenapi/testdata"

// TestInitPolicyRoundTrip: for the configuration init generates from each
// description, `idemgate policy` lists exactly the operations the
// description marks as enforced: POST and PATCH, and PUT or DELETE that
// declare an idempotency key, on every path template a route can express.
func TestInitPolicyRoundTrip(t *testing.T) {
	var specs []string
	for _, dir := range []string{"real", "synthetic"} {
		m, _ := filepath.Glob(filepath.Join(fromOpenAPITestdata, dir, "*.*"))
		for _, f := range m {
			if ext := filepath.Ext(f); ext == ".json" || ext == ".yaml" {
				specs = append(specs, f)
			}
		}
	}
	if len(specs) < 6 {
		t.Fatalf("found %d descriptions", len(specs))
	}
	for _, spec := range specs {
		t.Run(filepath.Base(spec), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "idemgate.yaml")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"init", "--from-openapi", spec, "--out", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("init exit %d: %s", code, stderr.String())
			}
			if !strings.HasPrefix(stderr.String(), "idemgate init: read ") {
				t.Errorf("stderr does not start with the summary line: %q", stderr.String())
			}
			stdout.Reset()
			stderr.Reset()
			if code := run([]string{"policy", "--config", out, "--format", "json"}, &stdout, &stderr); code != 0 {
				t.Fatalf("policy exit %d: %s", code, stderr.String())
			}
			var doc struct {
				Routes []struct {
					Path    string   `json:"path"`
					Methods []string `json:"methods"`
				} `json:"routes"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range doc.Routes {
				for _, m := range r.Methods {
					got = append(got, m+" "+r.Path)
				}
			}
			want := markedEnforced(t, spec)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("idemgate policy lists\n%q\nthe description marks\n%q", got, want)
			}
		})
	}
}

// markedEnforced derives, from the description alone, the operations it
// marks as enforced, as ServeMux patterns.
func markedEnforced(t *testing.T, spec string) []string {
	t.Helper()
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := fromopenapi.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, op := range doc.Operations {
		switch op.Method {
		case http.MethodPost, http.MethodPatch:
		case http.MethodPut, http.MethodDelete:
			if op.Key == nil {
				continue
			}
		default:
			continue
		}
		p, err := fromopenapi.Pattern(op.Path)
		if err != nil {
			continue // reported as skipped, never widened
		}
		want = append(want, op.Method+" "+p)
	}
	slices.Sort(want)
	return want
}

// TestInitCheck: --check exits 0 on the configuration init wrote, and 1
// listing the operation once its route is removed and a route the
// description does not have.
func TestInitCheck(t *testing.T) {
	spec := filepath.Join(fromOpenAPITestdata, "real", "adyen-checkout-v71.json")
	dir := t.TempDir()
	out := filepath.Join(dir, "idemgate.yaml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"init", "--from-openapi", spec, "--out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("init exit %d: %s", code, stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"init", "--from-openapi", spec, "--check", "--config", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("--check on the generated configuration: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "  - name: post-payments\n")
	j := strings.Index(s[i+1:], "  - name:") + i + 1
	s = s[:i] + s[j:]
	s = strings.Replace(s, `match: "POST /donations"`, `match: "POST /donations/legacy"`, 1)
	if err := os.WriteFile(out, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	code := run([]string{"init", "--from-openapi", spec, "--check", "--config", out}, &stdout, &stderr)
	want := "unsafe operations " + out + " does not enforce (2):\n" +
		"  POST /donations (post-donations): not enforced (the defaults route)\n" +
		"  POST /payments (post-payments): not enforced (the defaults route)\n" +
		"routes matching no operation of " + spec + " (1):\n" +
		"  route post-donations (POST /donations/legacy) matches no operation of the description\n"
	if code != 1 || stdout.String() != want {
		t.Errorf("--check after removing a route: exit %d\n%s\nwant exit 1\n%s", code, stdout.String(), want)
	}
}

// TestInitStdin: - reads the description from standard input.
func TestInitStdin(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fromOpenAPITestdata, "synthetic", "e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := initCommand([]string{"--from-openapi", "-"}, bytes.NewReader(data), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `match: "POST /v1/orders/{id}/capture"`) {
		t.Errorf("stdout lacks the capture route:\n%s", stdout.String())
	}
}

// TestInitErrors: an unreadable description stops init with exit 1 and a
// message naming what it could not read; usage mistakes exit 2.
func TestInitErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("openapi: 3.0.0\npaths:\n  /a: {post: [1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", "--from-openapi", bad}, 1, "paths./a.post: not an operation object"},
		{[]string{"init", "--from-openapi", filepath.Join(dir, "missing.json")}, 1, "reading the description"},
		{[]string{"init"}, 2, "--from-openapi SPEC is required"},
		{[]string{"init", "--from-openapi", bad, "--check"}, 2, "--check and --config FILE go together"},
		{[]string{"init", "--from-openapi", filepath.Join(fromOpenAPITestdata, "synthetic", "e2e.yaml"), "--store", "redis"}, 2, `--store "redis" must be one of`},
		{[]string{"init", "--from-openapi", filepath.Join(fromOpenAPITestdata, "synthetic", "e2e.yaml"), "--upstream", "ftp://x"}, 2, "is not an absolute http"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
