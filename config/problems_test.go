package config

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/problem"
)

// TestProblemsFormatErrors: a problems.template that does not parse, does
// not execute, or writes invalid JSON, a kind that is not the proxy's,
// a header idemgate sets and a content type that is no media type are
// reported at their key path, at the top level and in a route.
func TestProblemsFormatErrors(t *testing.T) {
	dir := t.TempDir()
	tmpl := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unparsable := tmpl("unparsable.tmpl", `{"error": {{json .Detail}`)
	failing := tmpl("failing.tmpl", `{{index .Status 1}}`)
	unescaped := tmpl("unescaped.tmpl", `{"error":{"message":"{{.Detail}}"}}`)
	good := tmpl("good.tmpl", `{"error":{"message":{{json .Detail}}}}`)
	for _, c := range []struct{ name, yaml, path, says string }{
		{"missing file", "problems: {template: " + filepath.Join(dir, "none.tmpl") + "}\n", "problems.template", "no such file"},
		{"unparsable", "problems: {template: " + unparsable + "}\n", "problems.template", "does not parse"},
		{"failing", "problems: {template: " + failing + "}\n", "problems.template", "does not execute"},
		{"unescaped", "problems: {template: " + unescaped + "}\n", "problems.template", "invalid JSON"},
		{"content type", "problems: {template: " + good + ", content_type: json}\n", "problems.content_type", "not a media type"},
		{"unknown kind", "problems: {headers: {key-reuse: {Stripe-Should-Retry: 'false'}}}\n", "problems.headers.key-reuse", "not a problem kind"},
		{"admin kind", "problems: {headers: {admin-unauthorized: {X-A: b}}}\n", "problems.headers.admin-unauthorized", "not a problem kind"},
		{"own header", "problems: {headers: {key-reused: {Content-Length: '1'}}}\n", "problems.headers.key-reused.content-length", "set by idemgate"},
		{"route template", "routes: [{name: a, match: /a, problems: {template: " + unescaped + "}}]\n", "routes[0].problems.template", "invalid JSON"},
		{"route kind", "routes: [{name: a, match: /a, problems: {headers: {nope: {X-A: b}}}}]\n", "routes[0].problems.headers.nope", "not a problem kind"},
		{"route unknown key", "routes: [{name: a, match: /a, problems: {docs_url: 'https://x/'}}]\n", "routes[0].problems.docs_url", "unknown key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeFile(t, base+c.yaml), nil)
			if err == nil {
				t.Fatalf("Load accepted:\n%s", c.yaml)
			}
			for _, e := range unjoin(err) {
				var fe *policy.FieldError
				if errors.As(e, &fe) && fe.Path == c.path && strings.Contains(fe.Err.Error(), c.says) {
					return
				}
			}
			t.Errorf("Load: %v\nwant %s: ...%s...", err, c.path, c.says)
		})
	}
}

// TestProblemsFormatRoutes: the top-level problems section shapes every
// route's answers, the defaults route's included; a route's own
// problems: overrides the keys it sets and inherits the others; without
// any, answers stay RFC 9457 (nil Format).
func TestProblemsFormatRoutes(t *testing.T) {
	c, err := Load(writeFile(t, base+`problems:
  template: ../docs/problems-stripe.tmpl
  content_type: application/json
  headers: {key-reused: {Stripe-Should-Retry: "false"}}
routes:
  - name: customers
    match: POST /v1/customers
  - name: billing
    match: POST /v1/invoices
    problems:
      headers: {key-reused: {X-Billing: "1"}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*problem.Format{}
	for _, r := range c.Policy.Routes() {
		if r.Problems == nil {
			t.Fatalf("route %s answers RFC 9457, want the template", r.Name)
		}
		byName[r.Name] = r.Problems
	}
	write := func(f *problem.Format) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		if err := (problem.Publisher{}).WriteFormat(rec, problem.KeyReused.With("reused"), f); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	for name, want := range map[string][2]string{"customers": {"false", ""}, "default": {"false", ""}, "billing": {"", "1"}} {
		rec := write(byName[name])
		h := rec.Header()
		if h.Get("Stripe-Should-Retry") != want[0] || h.Get("X-Billing") != want[1] || h.Get("Content-Type") != "application/json" ||
			!strings.Contains(rec.Body.String(), `"type":"idempotency_error"`) {
			t.Errorf("route %s: %v %s", name, h, rec.Body)
		}
	}
	c, err = Load(writeFile(t, base), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Policy.Routes() {
		if r.Problems != nil {
			t.Errorf("route %s has a problem format without problems: keys", r.Name)
		}
	}
}

// TestProblemsTemplateReadOnEveryLoad: the template file is read by each
// load, so a reload (which loads the policy again) applies an edited
// template, and refuses one that no longer validates.
func TestProblemsTemplateReadOnEveryLoad(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "p.tmpl")
	cfg := writeFile(t, base+"problems: {template: "+tmpl+", content_type: application/json}\n")
	render := func() string {
		c, err := Load(cfg, nil)
		if err != nil {
			return "error: " + err.Error()
		}
		rec := httptest.NewRecorder()
		_ = (problem.Publisher{}).WriteFormat(rec, problem.MissingKey.With("no key"), c.Policy.Routes()[0].Problems)
		return rec.Body.String()
	}
	for _, step := range []struct{ text, want string }{
		{`{"v":1,"m":{{json .Detail}}}`, `{"v":1,"m":"no key"}`},
		{`{"v":2,"m":{{json .Detail}}}`, `{"v":2,"m":"no key"}`},
		{`{"v":3,"m":"{{.Detail}}"}`, "problems.template: writes invalid JSON"},
	} {
		if err := os.WriteFile(tmpl, []byte(step.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := render(); !strings.Contains(got, step.want) {
			t.Errorf("template %s: got %s, want %s", step.text, got, step.want)
		}
	}
}
