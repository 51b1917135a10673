package fromopenapi

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
)

// specs are every description in testdata: the published ones and the
// synthetic ones.
func specs(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"testdata/real", "testdata/synthetic"} {
		m, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if ext := filepath.Ext(f); ext == ".json" || ext == ".yaml" {
				out = append(out, f)
			}
		}
	}
	if len(out) < 6 {
		t.Fatalf("testdata holds %d descriptions, want the published and synthetic ones", len(out))
	}
	return out
}

// generate reads, plans and renders path, and loads the result as serve
// would.
func generate(t testing.TB, path string, o Options) (*Plan, []byte, *config.Config) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Read(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	p, err := Generate(doc, o)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var buf bytes.Buffer
	if err := p.Render(&buf); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(buf.Bytes(), nil)
	if err != nil {
		t.Fatalf("%s: the generated configuration does not load: %v\n%s", path, err, buf.String())
	}
	return p, buf.Bytes(), cfg
}

// TestGeneratedConfigsLoad: every description, with every store and with
// --tombstones, gives a configuration that loads as written, whose
// enforcing routes are exactly the plan's, and that Check finds no drift
// in.
func TestGeneratedConfigsLoad(t *testing.T) {
	for _, path := range specs(t) {
		for _, o := range []Options{{}, {Store: "valkey", Tombstones: true}, {Store: "postgres"}, {Store: "bolt", Upstream: "http://127.0.0.1:9/x"}} {
			t.Run(filepath.Base(path)+"/"+o.Store, func(t *testing.T) {
				p, _, cfg := generate(t, path, o)
				var got []string
				for _, r := range cfg.Policy.Routes() {
					for _, m := range r.Methods {
						if r.Enforces(m) {
							got = append(got, m+" "+strings.SplitN(r.Match, " ", 2)[1])
						}
					}
				}
				if want := p.Enforced(); !slices.Equal(got, want) {
					t.Errorf("enforced routes:\n got %q\nwant %q", got, want)
				}
				// What init skipped is reported, and nothing else: a skipped
				// operation is unsafe and not enforced until a human adds a route.
				d := Check(p.Doc, cfg.Policy)
				var skipped []string
				for _, s := range p.Skipped {
					skipped = append(skipped, s.Op.Method+" "+s.Op.Path+idNote(s.Op)+": not enforced (the defaults route)")
				}
				if !slices.Equal(d.Unenforced, skipped) || len(d.Orphans) > 0 {
					t.Errorf("Check on the generated configuration: %+v; want only the skipped %q", d, skipped)
				}
				// A first trial listens on this machine only; serve's default
				// (every interface) needs a deliberate edit.
				if cfg.Listen != "127.0.0.1:8080" {
					t.Errorf("listen %q, want 127.0.0.1:8080", cfg.Listen)
				}
				if o.Upstream != "" && cfg.Upstream.URL.String() != o.Upstream {
					t.Errorf("upstream %s, want --upstream %s", cfg.Upstream.URL, o.Upstream)
				}
			})
		}
	}
}

// TestRules pins each mapping rule of docs/openapi.md on
// testdata/synthetic/rules.yaml.
func TestRules(t *testing.T) {
	p, text, cfg := generate(t, "testdata/synthetic/rules.yaml", Options{})
	route := func(name string) *policy.Route {
		t.Helper()
		for _, r := range cfg.Policy.Routes() {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no route %s in\n%s", name, text)
		return nil
	}
	if got := cfg.Upstream.URL.String(); got != "https://eu.api.example.com/api" {
		t.Errorf("upstream %s: want servers[0] with its variable's default and its path", got)
	}
	if d := cfg.Policy.Defaults(); d.Mode != policy.ModePassthrough {
		t.Errorf("defaults mode %s: what the description does not mark must pass through", d.Mode)
	}
	cases := []struct {
		route, match string
		methods      []string
		header       string
		required     bool
		owner        string
		body         fingerprint.BodyMode
		retention    string
	}{
		// required Idempotency-Key through $ref, spelled in lower case; JSON body through a $ref'd requestBody
		{"create-order", "POST /v1/orders", []string{"POST"}, "Idempotency-Key", true, "authorization", fingerprint.BodyJSON, "48h0m0s"},
		// optional key through a $ref to a $ref; +json media type; path parameter from the path item
		{"update-order", "PATCH /v1/orders/{order_id}", []string{"PATCH"}, "Idempotency-Key", false, "authorization", fingerprint.BodyJSON, "48h0m0s"},
		// DELETE declaring a key is enforced
		{"delete-order", "DELETE /v1/orders/{order_id}", []string{"DELETE"}, "Idempotency-Key", false, "authorization", fingerprint.BodyRaw, "48h0m0s"},
		// PUT declaring a required key
		{"put-settings", "PUT /v1/settings", []string{"PUT"}, "Idempotency-Key", true, "authorization", fingerprint.BodyRaw, "48h0m0s"},
		// operation security basic; form body; ISO 8601 retention on the operation
		{"capture-order", "POST /v1/orders/{order_id}/capture", []string{"POST"}, "Idempotency-Key", false, "authorization", fingerprint.BodyRaw, "2h0m0s"},
		// apiKey in a header; multipart; no operationId
		{"post-v1-uploads", "POST /v1/uploads", []string{"POST"}, "Idempotency-Key", false, "header:X-Api-Key", fingerprint.BodyRaw, "48h0m0s"},
		// oauth2 and OpenID Connect
		{"create-token", "POST /v1/tokens", []string{"POST"}, "Idempotency-Key", false, "jwt", fingerprint.BodyRaw, "48h0m0s"},
		{"create-session", "POST /v1/sessions", []string{"POST"}, "Idempotency-Key", false, "jwt", fingerprint.BodyRaw, "48h0m0s"},
		// two schemes required together; alternatives (the first is taken, the other reviewed)
		{"both", "POST /v1/both", []string{"POST"}, "Idempotency-Key", false, "[header:X-Api-Key, authorization]", fingerprint.BodyRaw, "48h0m0s"},
		{"either", "POST /v1/either", []string{"POST"}, "Idempotency-Key", false, "header:X-Api-Key", fingerprint.BodyRaw, "48h0m0s"},
		// another header marked as the key; trailing slash is that path alone; seconds retention
		{"create-transfer", "POST /v1/transfers/{$}", []string{"POST"}, "X-Request-Id", true, "authorization", fingerprint.BodyRaw, "1h0m0s"},
		// gRPC is raw
		{"grpc-create", "POST /grpc/orders.v1.Orders/Create", []string{"POST"}, "Idempotency-Key", false, "authorization", fingerprint.BodyRaw, "48h0m0s"},
		// no security, security: [], apiKey in query, mutualTLS: a placeholder owner, marked
		{"signup", "POST /v1/public/signup", []string{"POST"}, "Idempotency-Key", false, "authorization", fingerprint.BodyRaw, "48h0m0s"},
		{"query-key", "POST /v1/query-key", []string{"POST"}, "Idempotency-Key", false, "authorization", fingerprint.BodyRaw, "48h0m0s"},
		{"mtls", "POST /v1/mtls", []string{"POST"}, "Idempotency-Key", false, "authorization", fingerprint.BodyRaw, "48h0m0s"},
	}
	for _, c := range cases {
		r := route(c.route)
		got := []any{r.Match, r.Methods, r.HeaderName, r.Required, r.Owner.String(), r.Fingerprint.Body, r.Retention.String()}
		want := []any{c.match, c.methods, c.header, c.required, c.owner, c.body, c.retention}
		for i := range got {
			if !equal(got[i], want[i]) {
				t.Errorf("route %s: field %d is %v, want %v", c.route, i, got[i], want[i])
			}
		}
	}
	for _, name := range []string{"create-token", "create-session"} {
		r := route(name)
		if r.JWT == nil || r.JWT.JWKSURL != placeholderJWKS {
			t.Errorf("route %s: jwt %+v, want the marked placeholder JWKS URL", name, r.JWT)
		}
	}
	if iss := route("create-session").JWT.Issuers; !slices.Equal(iss, []string{"https://login.example.com/tenant"}) {
		t.Errorf("OpenID Connect issuer %q", iss)
	}
	if iss := route("create-token").JWT.Issuers; !slices.Equal(iss, []string{"https://auth.example.com"}) {
		t.Errorf("OAuth2 issuer %q", iss)
	}
	s := string(text)
	for _, want := range []string{
		"# REVIEW owner: the description exempts this operation from security (security: [])",
		"# REVIEW owner: security scheme apiKeyQuery is an apiKey in query",
		"# REVIEW owner: security scheme mtls is mutualTLS",
		"# REVIEW: the description also accepts bearer",
		"#   PUT /v1/orders/{order_id} (ReplaceOrder)",                        // PUT without a key: listed, not enforced
		"# resource_from: location  # proposed: DELETE /v1/orders/{order_id}", // tombstone proposed in a comment
		`#   POST /v1/files/{name}.{ext} (uploadNamed): path template`,        // reported, not widened
		`#   POST /v1/jobs/{id}:cancel (cancelJob): path template`,
		"# servers in the description: https://eu.api.example.com/api https://backup.example.com/api",
		"# gRPC: body: protobuf",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("generated configuration lacks %q", want)
		}
	}
	if len(p.Skipped) != 2 || len(p.NotEnforced) != 1 || p.Safe != 2 {
		t.Errorf("skipped %d, not enforced %d, safe %d; want 2, 1, 2", len(p.Skipped), len(p.NotEnforced), p.Safe)
	}
	if !strings.Contains(p.Summary(), "read 20 operations: 15 routes written") {
		t.Errorf("summary %q", p.Summary())
	}

	_, _, tomb := generate(t, "testdata/synthetic/rules.yaml", Options{Tombstones: true})
	for _, r := range tomb.Policy.Routes() {
		if want := r.Name == "create-order"; (r.ResourceFrom == policy.ResourceFromLocation) != want {
			t.Errorf("--tombstones: route %s resource_from %q", r.Name, r.ResourceFrom)
		}
	}
}

func equal(a, b any) bool {
	if x, ok := a.([]string); ok {
		return slices.Equal(x, b.([]string))
	}
	return a == b
}

// TestSwaggerAndFern: Swagger 2.0 (host, basePath, schemes, consumes,
// formData, securityDefinitions) and Fern's idempotency extensions.
func TestSwaggerAndFern(t *testing.T) {
	_, _, cfg := generate(t, "testdata/synthetic/swagger2.yaml", Options{})
	if got := cfg.Upstream.URL.String(); got != "https://pets.example.com/v2" {
		t.Errorf("swagger upstream %s", got)
	}
	got := map[string]string{}
	for _, r := range cfg.Policy.Routes() {
		req := ""
		if r.Required {
			req = "required"
		}
		got[r.Name] = r.Match + "|" + r.Owner.String() + "|" + string(r.Fingerprint.Body) + "|" + req
	}
	want := map[string]string{
		"add-pet":              "POST /pets|header:X-Pet-Token|json|required",
		"update-pet-with-form": "POST /pets/{petId}|jwt|raw|",
		"default":              "|header:X-Pet-Token|json|",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("swagger route %s: %q, want %q", k, got[k], v)
		}
	}

	_, text, cfg := generate(t, "testdata/synthetic/fern.json", Options{})
	for _, r := range cfg.Policy.Routes() {
		if r.Name == policy.DefaultRouteName {
			continue
		}
		if r.HeaderName != "X-Idempotency-Key" {
			t.Errorf("fern route %s reads %s, want X-Idempotency-Key", r.Name, r.HeaderName)
		}
		if want := r.Name == "payments-delete"; r.Required != want {
			t.Errorf("fern route %s required %v", r.Name, r.Required)
		}
	}
	if !strings.Contains(string(text), "REVIEW: placeholder, the description names no absolute server URL") ||
		cfg.Upstream.URL.String() != placeholderUpstream+"/relative/base" {
		t.Errorf("relative server: upstream %s, want the marked placeholder keeping /relative/base", cfg.Upstream.URL)
	}
}

// TestRealDescriptions pins what init makes of the published descriptions.
func TestRealDescriptions(t *testing.T) {
	p, text, cfg := generate(t, "testdata/real/stripe-spec3.json", Options{})
	if n := len(p.Doc.Operations); n < 300 {
		t.Errorf("stripe: %d operations read", n)
	}
	if len(p.Routes) != 174 || len(p.Skipped) != 0 {
		t.Errorf("stripe: %d routes, %d skipped; want 174, 0", len(p.Routes), len(p.Skipped))
	}
	if d := cfg.Policy.Defaults(); d.Owner.String() != "authorization" || d.Fingerprint.Body != fingerprint.BodyRaw {
		t.Errorf("stripe defaults: owner %s body %s; want authorization (basic or bearer), raw (form bodies)", d.Owner, d.Fingerprint.Body)
	}
	if !strings.Contains(string(text), "    match: \"POST /v1/customers/{customer}/sources/{id}/verify\"") {
		t.Error("stripe: no route for POST /v1/customers/{customer}/sources/{id}/verify")
	}

	p, _, cfg = generate(t, "testdata/real/adyen-checkout-v71.json", Options{})
	if cfg.Upstream.URL.String() != "https://checkout-test.adyen.com/v71" {
		t.Errorf("adyen upstream %s", cfg.Upstream.URL)
	}
	keyed := 0
	for _, r := range p.Routes {
		if r.Op.Key != nil && r.Op.Key.Name == "Idempotency-Key" {
			keyed++
		}
	}
	if keyed != 22 {
		t.Errorf("adyen: %d routes with the $ref'd Idempotency-Key, want 22", keyed)
	}
}

// TestCheckReportsDrift: an operation whose route was removed, a route the
// description lost, a route reading another key header and one that stopped
// requiring the key are all reported.
func TestCheckReportsDrift(t *testing.T) {
	_, text, _ := generate(t, "testdata/synthetic/rules.yaml", Options{})
	s := string(text)
	s = strings.Replace(s, "  - name: signup\n    match: \"POST /v1/public/signup\"", "  - name: signup\n    match: \"POST /v1/public/signin\"", 1)
	s = strings.Replace(s, "    header: \"X-Request-Id\"", "    header: \"X-Other\"", 1)
	s = strings.Replace(s, "    required: true  # header parameter idempotency-key is required\n", "", 1)
	i := strings.Index(s, "  - name: both\n")
	j := strings.Index(s[i+1:], "  - name:") + i + 1
	s = s[:i] + s[j:]
	cfg, err := config.Parse([]byte(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile("testdata/synthetic/rules.yaml")
	doc, err := Read(data)
	if err != nil {
		t.Fatal(err)
	}
	d := Check(doc, cfg.Policy)
	want := []string{
		"POST /v1/both (both): not enforced (the defaults route)",
		"POST /v1/files/{name}.{ext} (uploadNamed): not enforced (the defaults route)",
		"POST /v1/jobs/{id}:cancel (cancelJob): not enforced (the defaults route)",
		"POST /v1/orders (createOrder): route create-order lets a request without idempotency-key through, the description requires it",
		"POST /v1/public/signup (signup): not enforced (the defaults route)",
		"POST /v1/transfers/ (createTransfer): route create-transfer reads the key from X-Other, the description declares X-Request-Id",
	}
	if !slices.Equal(d.Unenforced, want) {
		t.Errorf("unenforced:\n got %q\nwant %q", d.Unenforced, want)
	}
	if want := []string{"route signup (POST /v1/public/signin) matches no operation of the description"}; !slices.Equal(d.Orphans, want) {
		t.Errorf("orphans %q, want %q", d.Orphans, want)
	}
}

// TestConflictingTemplatesSkipped: two templates ServeMux cannot order
// (neither more specific) get one route; the other is skipped, named.
func TestConflictingTemplatesSkipped(t *testing.T) {
	doc, err := Read([]byte("openapi: 3.0.0\npaths:\n  /a/{x}/c: {post: {operationId: one}}\n  /a/b/{y}: {post: {operationId: two}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Generate(doc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Routes) != 1 || len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Reason, "cannot be a route") {
		t.Errorf("routes %v, skipped %+v; want one route and one skipped with ServeMux's reason", p.Enforced(), p.Skipped)
	}
}

// TestSkipReasonWhole: the REVIEW skipped comment carries the whole
// reason, wrapped over comment lines, so the reader learns why and what a
// wider route would do.
func TestSkipReasonWhole(t *testing.T) {
	doc, err := Read([]byte("openapi: 3.0.0\npaths:\n  /files/{name}.{ext}: {post: {operationId: upload}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Generate(doc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Skipped) != 1 {
		t.Fatalf("skipped %+v, want the one operation", p.Skipped)
	}
	var buf bytes.Buffer
	if err := p.Render(&buf); err != nil {
		t.Fatal(err)
	}
	_, tail, ok := strings.Cut(buf.String(), "# REVIEW skipped")
	if !ok {
		t.Fatalf("no REVIEW skipped section:\n%s", buf.String())
	}
	var words []string
	for _, line := range strings.Split(tail, "\n")[1:] {
		c, ok := strings.CutPrefix(line, "#")
		if !ok {
			break
		}
		if len(line) > 110 {
			t.Errorf("comment line of %d characters, want it wrapped: %q", len(line), line)
		}
		words = append(words, strings.Fields(c)...)
	}
	got := strings.Join(words, " ")
	if want := "POST /files/{name}.{ext} (upload): " + p.Skipped[0].Reason; got != want {
		t.Errorf("skip comment says\n %q\nwant the whole reason\n %q", got, want)
	}
	if _, err := config.Parse(buf.Bytes(), nil); err != nil {
		t.Errorf("the configuration does not load: %v", err)
	}
}

func TestPattern(t *testing.T) {
	for in, want := range map[string]string{
		"/":                      "/{$}",
		"/v1/orders":             "/v1/orders",
		"/v1/orders/":            "/v1/orders/{$}",
		"/v1/{order-id}/{1st}":   "/v1/{order_id}/{p1st}",
		"/a/{x-y}/{x_y}":         "/a/{x_y}/{x_y2}",
		"/files/{name}.{ext}":    "",
		"/v1/jobs/{id}:cancel":   "",
		"/v1//orders":            "",
		"v1/orders":              "",
		"/v1/{unclosed":          "",
		"/v1/{id}/items/{$}":     "",
		"/v1/orders/{id}/refund": "/v1/orders/{id}/refund",
	} {
		got, err := Pattern(in)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("Pattern(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestReadRejectsBadInput: no input makes Read panic, and each error names
// what it could not read.
func TestReadRejectsBadInput(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "empty",
		"{":                                "not valid JSON",
		"[1, 2]":                           "not an object",
		"- a\n- b\n":                       "not an object",
		"a: [unclosed":                     "not valid YAML",
		"info: {}\npaths: {}\n":            "names no version",
		"openapi: 4.0.0\n":                 "openapi: \"4.0.0\" is not a version",
		"openapi: 3\n":                     "openapi: 3 is not a version",
		"swagger: '1.2'\n":                 "swagger: \"1.2\" is not a version",
		"openapi: 3.0.0\npaths: []\n":      "paths: not a mapping",
		"openapi: 3.0.0\npaths: {/a: 5}\n": "paths./a: not a path item",
		"openapi: 3.0.0\npaths: {/a: {post: []}}\n":                  "paths./a.post: not an operation",
		"openapi: 3.0.0\npaths: {/a: {$ref: '#/paths/~1a'}}\n":       "chain longer",
		"openapi: 3.0.0\npaths: {/a: {$ref: 'other.yaml#/x'}}\n":     "points outside this file",
		"openapi: 3.0.0\npaths: {/a: {$ref: '#/components/nope'}}\n": "no member",
		"openapi: 3.0.0\ncomponents: 7\n":                            "components: not an object",
		"openapi: 3.0.0\nsecurity: {a: 1}\n":                         "security: not a list",
		"openapi: 3.0.0\npaths: {/a: {parameters: 3}}\n":             "parameters: not a list",
	} {
		_, err := Read([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%q) = %v; want an error containing %q", in, err, want)
		}
	}
	// Read partly: the operation is kept, the warning names the parameter.
	doc, err := Read([]byte("openapi: 3.0.0\npaths:\n  /a:\n    post:\n      parameters: [{$ref: 'x.yaml#/p'}, 7]\n      requestBody: {$ref: '#/nope'}\n"))
	if err != nil || len(doc.Operations) != 1 || len(doc.Warnings) != 3 {
		t.Fatalf("Read = %+v, %v; want one operation and three warnings", doc, err)
	}
}

// BenchmarkGenerate is init on an 8 MB (or a little larger) description
// (Stripe's, its paths repeated under more prefixes): read, plan, render and load the result.
// The bound is 3 s on the 2-core reference machine.
func BenchmarkGenerate(b *testing.B) {
	data := bigDescription(b, 8<<20)
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		b.Fatal(err)
	}
	yml, err := yaml.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{{"json", data}, {"yaml", yml}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			b.ReportMetric(float64(len(c.data))/1e6, "MB-description")
			for b.Loop() {
				doc, err := Read(c.data)
				if err != nil {
					b.Fatal(err)
				}
				p, err := Generate(doc, Options{})
				if err != nil {
					b.Fatal(err)
				}
				var buf bytes.Buffer
				if err := p.Render(&buf); err != nil {
					b.Fatal(err)
				}
				if _, err := config.Parse(buf.Bytes(), nil); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(p.Routes)), "routes")
			}
		})
	}
}

// bigDescription is Stripe's description with its paths repeated under
// /copyN prefixes until it holds at least n bytes.
func bigDescription(tb testing.TB, n int) []byte {
	tb.Helper()
	data, err := os.ReadFile("testdata/real/stripe-spec3.json")
	if err != nil {
		tb.Fatal(err)
	}
	var top map[string]json.RawMessage
	var paths map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(top["paths"], &paths); err != nil {
		tb.Fatal(err)
	}
	orig := maps.Clone(paths)
	var out []byte
	for i := 1; len(out) < n; i++ {
		for p, item := range orig {
			paths["/copy"+strconv.Itoa(i)+p] = item
		}
		if top["paths"], err = json.Marshal(paths); err != nil {
			tb.Fatal(err)
		}
		if out, err = json.MarshalIndent(top, "", "  "); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// TestReviewNoteOnTheRouteItConcerns: with one route under the
// description's security and one exempted by security: [], the exempted
// route carries the REVIEW note, and the summary names it.
func TestReviewNoteOnTheRouteItConcerns(t *testing.T) {
	p, text, _ := generate(t, "testdata/synthetic/exempt.yaml", Options{})
	if p.Defaults.Owner.Review {
		t.Errorf("defaults' owner is the one under review (%q); want the route's own", p.Defaults.Owner.Note)
	}
	s := string(text)
	_, after, ok := strings.Cut(s, "- name: update-thing")
	if !ok || !strings.Contains(after, "# REVIEW owner: the description exempts this operation from security (security: [])") {
		t.Errorf("update-thing lacks its REVIEW note:\n%s", s)
	}
	if want := "1 route whose owner needs review (update-thing)"; !strings.Contains(p.Summary(), want) {
		t.Errorf("summary %q lacks %q", p.Summary(), want)
	}
}
