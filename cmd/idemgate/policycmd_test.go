package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// policyConfig has a required JSON route with exclusions and a path
// wildcard, both webhook routes, and a passthrough route that must not be
// published.
const policyConfig = `upstream: {url: "http://127.0.0.1:3000"}
defaults:
  owner: "header:X-User"
routes:
  - name: capture
    match: "POST /v1/payments/{id}/capture"
    required: true
    retention: 48h
    advertise_expiry: true
    concurrent: conflict
    fingerprint: {body: json, exclude: ["/client_ts"]}
  - name: stripe
    match: "POST /webhooks/stripe"
    scope: stripe
    owner: none
    allow_global_keys: true
    required: true
    key: {from: body, pointer: /id}
  - name: github
    match: "POST /webhooks/github"
    scope: github
    owner: none
    allow_global_keys: true
    key: {from: header, name: X-GitHub-Delivery}
  - name: uploads
    match: "/v1/uploads/"
    mode: passthrough
`

// policyBinary builds the real idemgate binary and writes policyConfig.
func policyBinary(t *testing.T) (bin, cfg string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "idemgate")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg = filepath.Join(dir, "idemgate.yaml")
	if err := os.WriteFile(cfg, []byte(policyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, cfg
}

func runPolicy(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, append([]string{"policy"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("idemgate policy %v: %v\n%s", args, err, errOut.String())
	}
	return out.Bytes()
}

func TestPolicyCommandBinary(t *testing.T) {
	bin, cfg := policyBinary(t)

	t.Run("json", func(t *testing.T) {
		var doc publishedPolicy
		dec := json.NewDecoder(bytes.NewReader(runPolicy(t, bin, "--config", cfg, "--format", "json")))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if doc.Format != "idemgate-policy/1" {
			t.Errorf("format = %q", doc.Format)
		}
		var names []string
		for _, r := range doc.Routes {
			names = append(names, r.Name)
		}
		if !reflect.DeepEqual(names, []string{"capture", "stripe", "github", "default"}) {
			t.Fatalf("routes = %v (passthrough routes are not published)", names)
		}
		c := doc.Routes[0]
		if c.Path != "/v1/payments/{id}/capture" || !reflect.DeepEqual(c.Methods, []string{"POST"}) || !c.Key.Required ||
			c.Key.Header != "Idempotency-Key" || c.RetentionSeconds != 48*3600 || c.Concurrent.Behaviour != "conflict" || !c.AdvertiseExpiry ||
			!reflect.DeepEqual(c.Fingerprint.Exclude, []string{"/client_ts"}) || c.Fingerprint.Body != "json" {
			t.Errorf("capture = %+v", c)
		}
		if s := doc.Routes[1]; s.Key.From != "body" || s.Key.Pointer != "/id" || s.Key.Header != "" {
			t.Errorf("stripe key = %+v", s.Key)
		}
		// The spelling the config wrote, not the canonical X-Github-Delivery.
		if g := doc.Routes[2]; g.Key.Header != "X-GitHub-Delivery" || g.Key.Required || g.AdvertiseExpiry {
			t.Errorf("github key = %+v", g.Key)
		}
		has := func(r publishedRoute, slug string) bool {
			for _, p := range r.Problems {
				if strings.HasSuffix(p.Type, "/"+slug) {
					if p.Action == "" || p.Status == 0 {
						t.Errorf("%s: %+v", slug, p)
					}
					return true
				}
			}
			return false
		}
		if !has(c, "missing-key") || !has(c, "key-reused") || !has(c, "missing-owner") || has(c, "invalid-credentials") || has(c, "admin-unauthorized") {
			t.Errorf("capture problems = %+v", c.Problems)
		}
		if has(doc.Routes[2], "missing-key") || has(doc.Routes[1], "missing-owner") {
			t.Errorf("optional or global routes list missing-key or missing-owner")
		}
	})

	t.Run("markdown", func(t *testing.T) {
		md := string(runPolicy(t, bin, "--config", cfg, "--format", "markdown"))
		for _, want := range []string{
			"## `POST` `/v1/payments/{id}/capture`", "the `Idempotency-Key` header", "**Required**", "for 2 days",
			"except the members `/client_ts`", "gets `409 request-in-progress` at once",
			"the JSON body member `/id`", "the `X-GitHub-Delivery` header", "on any other path", "carry `Idempotency-Key-Expires`",
			"| [`key-reused`](https://idemgate.dev/problems/key-reused) | 422 | use a new key |",
		} {
			if !strings.Contains(md, want) {
				t.Errorf("markdown lacks %q:\n%s", want, md)
			}
		}
		if strings.Contains(md, "uploads") {
			t.Error("markdown publishes the passthrough route")
		}
	})

	t.Run("openapi", func(t *testing.T) {
		out := runPolicy(t, bin, "--config", cfg, "--format", "openapi")
		doc, err := openapi3.NewLoader().LoadFromData(out)
		if err != nil {
			t.Fatalf("load: %v\n%s", err, out)
		}
		if err := doc.Validate(context.Background()); err != nil {
			t.Fatalf("validate: %v\n%s", err, out)
		}
		if doc.OpenAPI != "3.1.0" {
			t.Errorf("openapi = %q", doc.OpenAPI)
		}
		op := doc.Paths.Find("/v1/payments/{id}/capture").Post
		if op == nil {
			t.Fatalf("no POST /v1/payments/{id}/capture:\n%s", out)
		}
		var key *openapi3.Parameter
		for _, p := range op.Parameters {
			if p.Value.In == "header" {
				key = p.Value
			}
		}
		if key == nil || key.Name != "Idempotency-Key" || !key.Required {
			t.Fatalf("key parameter = %+v", key)
		}
		for _, status := range []int{400, 409, 413, 422, 502, 503, 504} {
			r := op.Responses.Status(status)
			if r == nil || r.Value.Content.Get("application/problem+json") == nil {
				t.Errorf("no %d problem response", status)
			}
		}
		if stripe := doc.Paths.Find("/webhooks/stripe").Post; stripe == nil || len(stripe.Parameters) != 0 {
			t.Errorf("stripe operation (key in the body, no header parameter) = %+v", stripe)
		}
		gh := doc.Paths.Find("/webhooks/github").Post
		if gh == nil || len(gh.Parameters) != 1 || gh.Parameters[0].Value.Name != "X-GitHub-Delivery" {
			t.Fatalf("github operation = %+v", gh)
		}
		// The headers a client sees: Idempotent-Replayed on the upstream's
		// answers, Idempotency-Key-Expires where advertised, Retry-After on
		// 409 and 503.
		okHeaders := func(op *openapi3.Operation) openapi3.Headers {
			r := op.Responses.Value("2XX")
			if r == nil {
				t.Fatalf("no 2XX response:\n%s", out)
			}
			return r.Value.Headers
		}
		if h := okHeaders(op); h["Idempotent-Replayed"] == nil || h["Idempotency-Key-Expires"] == nil {
			t.Errorf("capture 2XX headers = %v; want Idempotent-Replayed and Idempotency-Key-Expires", h)
		}
		if h := okHeaders(gh); h["Idempotent-Replayed"] == nil || h["Idempotency-Key-Expires"] != nil {
			t.Errorf("github 2XX headers = %v; want Idempotent-Replayed only (no advertise_expiry)", h)
		}
		for _, status := range []int{409, 503} {
			if r := op.Responses.Status(status); r == nil || r.Value.Headers["Retry-After"] == nil || r.Value.Headers["Retry-After"].Value.Schema.Value.Type.Is("integer") == false {
				t.Errorf("%d: no integer Retry-After header", status)
			}
		}
		// The key length agrees with --format json: the key's 255
		// characters, and the field's maxLength explained.
		if key.Extensions["x-idemgate-key-max-length"] != float64(255) || key.Schema.Value.MaxLength == nil ||
			*key.Schema.Value.MaxLength != 512 || !strings.Contains(key.Description, "at most 255 characters") {
			t.Errorf("key length: extension %v, maxLength %v, description %q", key.Extensions["x-idemgate-key-max-length"], key.Schema.Value.MaxLength, key.Description)
		}
		if doc.Paths.Find("/v1/uploads/") != nil {
			t.Error("openapi publishes the passthrough route")
		}
	})

	t.Run("errors", func(t *testing.T) {
		cmd := exec.Command(bin, "policy", "--config", cfg, "--format", "yaml")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "markdown, json or openapi") {
			t.Errorf("bad format: %v %s", err, out)
		}
		cmd = exec.Command(bin, "policy")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--config FILE is required") {
			t.Errorf("no config: %v %s", err, out)
		}
	})
}
