package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
)

// variantPolicy is the configuration of the observed escapes: defaults that
// enforce POST and PATCH with an optional key, a required "POST /v1/orders",
// a "/v1/" passthrough tree, a required "POST /v1/payments/" subtree, a
// required "POST /v1/items/{id}", and a required "PATCH /v1/legacy" that
// only a method override reaches from a POST.
func variantPolicy(t testing.TB) *Policy {
	t.Helper()
	req := func(name, match string) Route {
		r := testRoute(name, match)
		r.Required = true
		return r
	}
	v1 := testRoute("v1", "/v1/")
	v1.Mode = ModePassthrough
	legacy := req("legacy", "PATCH /v1/legacy")
	p, err := New(DefaultRoute(), []Route{req("orders", "POST /v1/orders"), v1,
		req("payments", "POST /v1/payments/"), req("items", "POST /v1/items/{id}"), legacy})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// parseRequest reads a raw request head as the server does, so RawPath,
// Host and the header are what the proxy sees.
func parseRequest(t testing.TB, head, body string) *http.Request {
	t.Helper()
	if body != "" {
		head += "\r\nContent-Length: " + itoa(len(body))
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head + "\r\n\r\n" + body)))
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	return r
}

func itoa(n int) string { return strconv.Itoa(n) }

func multipartBody(t testing.TB, fields ...string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Close()
	return w.FormDataContentType(), b.String()
}

// TestDecideVariants: every variant kind, each against the route the
// upstream may execute it as. want is the governing route's name, or
// "refuse"; needBody is the provisional decision before the body.
func TestDecideVariants(t *testing.T) {
	p := variantPolicy(t)
	mpType, mpPatch := multipartBody(t, "name", "x", "_method", "patch")
	_, mpPlain := multipartBody(t, "name", "x")
	mpDotType, mpDot := multipartBody(t, "name", "x", ".method", "PATCH")
	const form = "\r\nContent-Type: application/x-www-form-urlencoded"
	tests := []struct {
		name, head, body string
		want             string
		needBody         bool
	}{
		// Canonical forms: governed by the route they match.
		{"canonical", "POST /v1/orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"canonical passthrough", "POST /v1/other HTTP/1.1\r\nHost: x", "", "v1", false},
		{"canonical defaults", "POST /elsewhere HTTP/1.1\r\nHost: x", "", "default", false},
		{"GET is enforced nowhere", "GET /V1/Orders/;x=%2F HTTP/1.1\r\nHost: x", "", "default", false},
		{"GET is enforced nowhere, in the tree", "GET /v1/Orders/;x=%2F HTTP/1.1\r\nHost: x", "", "v1", false},
		{"escaped slash inside a wildcard", "POST /v1/items/a%2Fb HTTP/1.1\r\nHost: x", "", "items", false},
		{"subtree", "POST /v1/payments/ HTTP/1.1\r\nHost: x", "", "payments", false},

		// Path variants governed by a stricter route: enforced under it.
		{"trailing slash added", "POST /v1/orders/ HTTP/1.1\r\nHost: x", "", "orders", false},
		{"trailing slash removed", "POST /v1/payments HTTP/1.1\r\nHost: x", "", "payments", false},
		{"letter case", "POST /v1/Orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"letter case and slash", "POST /V1/ORDERS/ HTTP/1.1\r\nHost: x", "", "orders", false},
		{"path parameter", "POST /v1/orders;jsessionid=1 HTTP/1.1\r\nHost: x", "", "orders", false},
		{"parameters on every segment", "POST /v1;a=b/orders;c HTTP/1.1\r\nHost: x", "", "orders", false},
		{"parameter hiding a dot-dot", "POST /v1/x/..;/orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"encoded slash", "POST /v1%2Forders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"encoded letter", "POST /v1/%6Frders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"encoded dot segment", "POST /v1/%2e/orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"encoded dot-dot", "POST /v1/x/%2E%2E/orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"backslash", "POST /v1\\orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"encoded backslash", "POST /v1%5Corders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"dot segments", "POST /v1/x/../orders/ HTTP/1.1\r\nHost: x", "", "orders", false},
		{"repeated slashes", "POST //v1//orders// HTTP/1.1\r\nHost: x", "", "orders", false},
		{"out of a passthrough subtree", "POST /v1/uploads/..%2F..%2Fv1%2Forders HTTP/1.1\r\nHost: x", "", "orders", false},

		// A variant governed by another route as strict: refused.
		{"encoded slash out of a wildcard", "POST /v1/items/..%2F..%2Fv1%2Forders HTTP/1.1\r\nHost: x", "", "refuse", false},

		// Method variants: refused when stricter.
		{"lower-case method", "post /v1/orders HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"mixed-case method on a slash variant", "Post /v1/orders/ HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"override header on GET", "GET /v1/orders HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: POST", "", "refuse", false},
		{"override header, list", "PUT /v1/legacy HTTP/1.1\r\nHost: x\r\nX-Method-Override: GET, patch", "", "refuse", false},
		{"X-HTTP-Method", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nX-HTTP-Method: PATCH", "", "refuse", false},
		{"_method query", "POST /v1/legacy?_method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"_method query, escaped", "POST /v1/legacy?a=1&%5Fmethod=patch HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"_method query on a case variant", "POST /V1/Legacy/?_method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"_method form field", "POST /v1/legacy HTTP/1.1\r\nHost: x" + form, "a=1&_method=PATCH", "refuse", true},
		{"_method form field, plus", "POST /v1/legacy HTTP/1.1\r\nHost: x" + form + "; charset=utf-8", "_method=+patch+", "refuse", true},
		{"_method multipart field", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: " + mpType, mpPatch, "refuse", true},
		{"override on a keyed enforced request", "POST /v1/orders?_method=DELETE HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", "", "refuse", false},

		// Overrides that change nothing stay allowed.
		{"form without _method", "POST /v1/legacy HTTP/1.1\r\nHost: x" + form, "a=1&method=PATCH", "v1", true},
		{"multipart without _method", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: " + mpType, mpPlain, "v1", true},
		{"form where no override matters", "POST /v1/other HTTP/1.1\r\nHost: x" + form, "_method=PATCH", "v1", false},
		{"override to a weaker method", "POST /v1/other HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: DELETE", "", "v1", false},
		{"override naming its own method", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nX-HTTP-Method-Override: post", "", "orders", false},
		{"form GET is not read", "GET /v1/legacy HTTP/1.1\r\nHost: x" + form, "_method=PATCH", "v1", false},

		// Path variants that Rails, IIS and double-decoding hops execute as
		// /v1/orders.
		{"format extension", "POST /v1/orders.json HTTP/1.1\r\nHost: x", "", "orders", false},
		{"format extension, case and slash", "POST /V1/Orders.XML/ HTTP/1.1\r\nHost: x", "", "orders", false},
		{"format extension, encoded dot", "POST /v1/orders%2Ejson HTTP/1.1\r\nHost: x", "", "orders", false},
		{"double-encoded slash", "POST /v1%252Forders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"triple-encoded slash", "POST /v1%25252Forders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"double-encoded dot-dot", "POST /v1/x/%252E%252E/orders HTTP/1.1\r\nHost: x", "", "orders", false},
		{"double-encoded extension dot", "POST /v1/orders%252ejson HTTP/1.1\r\nHost: x", "", "orders", false},
		{"trailing space", "POST /v1/orders%20 HTTP/1.1\r\nHost: x", "", "orders", false},
		{"trailing dot", "POST /v1/orders. HTTP/1.1\r\nHost: x", "", "orders", false},
		{"trailing dots and spaces on every segment", "POST /v1.%20/orders.. HTTP/1.1\r\nHost: x", "", "orders", false},
		{"extension after a trailing dot", "POST /v1/orders.json. HTTP/1.1\r\nHost: x", "", "orders", false},
		{"extension inside a wildcard", "POST /v1/items/7.json HTTP/1.1\r\nHost: x", "", "items", false},
		{"extension that changes nothing", "POST /v1/other.json HTTP/1.1\r\nHost: x", "", "v1", false},
		{"hidden file, no extension", "POST /v1/orders/.json HTTP/1.1\r\nHost: x", "", "v1", false},
		{"several normalizations at once", "POST /V1%2FOrders;a.JSON/ HTTP/1.1\r\nHost: x", "", "orders", false},
		{"every normalization at once: too many forms to match", "POST /V1%255C..;a/x%25252F..%5C.;b/Orders.%20/..%2e.JSON.;c/ HTTP/1.1\r\nHost: x", "", "refuse", false},

		// Method variants that Rack, WSGI, PHP, Laravel and Express read.
		{"override header with underscores", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nX-HTTP_Method_Override: PATCH", "", "refuse", false},
		{"X_HTTP_METHOD", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nX_HTTP_METHOD: patch", "", "refuse", false},
		{"x-method_override", "PUT /v1/legacy HTTP/1.1\r\nHost: x\r\nx-method_override: PATCH", "", "refuse", false},
		{"form without Content-Type", "POST /v1/legacy HTTP/1.1\r\nHost: x", "_method=PATCH&a=1", "refuse", true},
		{"form with an empty Content-Type", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: ", "_method=PATCH", "refuse", true},
		{"form with a malformed parameter", "POST /v1/legacy HTTP/1.1\r\nHost: x" + form + "; charset", "_method=PATCH", "refuse", true},
		{"no Content-Type, no body", "POST /v1/legacy HTTP/1.1\r\nHost: x", "", "v1", false},
		{"JSON _method", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"a":1,"_method":"PATCH"}`, "refuse", true},
		{"+json _method", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.api+json; charset=utf-8", `{"_method":"patch"}`, "refuse", true},
		{"JSON _method, escaped key", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"\u005fmethod":"PATCH"}`, "refuse", true},
		{"JSON _method, duplicate key", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"_method":"POST","_method":"PATCH"}`, "refuse", true},
		{"JSON _method after nested values", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"a":{"b":[1,{"_method":"x"}]},"_method":"PATCH"}`, "refuse", true},
		{"JSON nested _method", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"a":{"_method":"PATCH"}}`, "v1", true},
		{"JSON _method not a string", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"_method":["PATCH"]}`, "v1", true},
		{"JSON where no override matters", "POST /v1/other HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", `{"_method":"PATCH"}`, "v1", false},
		{"PHP name: dot", "POST /v1/legacy?.method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"PHP name: space", "POST /v1/legacy?%20method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"PHP name: plus", "POST /v1/legacy?+method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"PHP name: bracket", "POST /v1/legacy?[method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"PHP name: leading space", "POST /v1/legacy?%20_method=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"PHP name: NUL", "POST /v1/legacy?_method%00x=PATCH HTTP/1.1\r\nHost: x", "", "refuse", false},
		{"PHP name in a form", "POST /v1/legacy HTTP/1.1\r\nHost: x" + form, "a=1&.method=PATCH", "refuse", true},
		{"PHP name in multipart", "POST /v1/legacy HTTP/1.1\r\nHost: x\r\nContent-Type: " + mpDotType, mpDot, "refuse", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parseRequest(t, tt.head, tt.body)
			d := p.Decide(r)
			if d.NeedBody != tt.needBody {
				t.Fatalf("NeedBody = %v, want %v (decision %+v)", d.NeedBody, tt.needBody, d)
			}
			if d.NeedBody {
				d = p.DecideBody(r, []byte(tt.body))
				if d.NeedBody {
					t.Fatal("DecideBody set NeedBody")
				}
			}
			got := d.Route.Name
			if d.Refuse != "" {
				got = "refuse"
			}
			if got != tt.want {
				t.Errorf("%q: decided %s (route %s, matched %s, refuse %q), want %s", tt.head, got, d.Route.Name, d.Matched.Name, d.Refuse, tt.want)
			}
			if d.Matched == nil || d.Matched != p.Match(r) {
				t.Errorf("Matched = %v, want Match's %v", d.Matched, p.Match(r))
			}
		})
	}
}

// TestDecideTies: two stricter routes of different scopes tie, a declared
// route as strict as the matched one governs the canonical form, or the
// defaults route is as strict as a declared one.
func TestDecideTies(t *testing.T) {
	orders := testRoute("orders", "POST /v1/orders")
	tree := testRoute("v1", "/v1/") // enforce, key optional, as the defaults
	p := mustNew(t, orders, tree)
	for target, want := range map[string]string{
		"/v1/orders":  "orders", // its trailing-slash form is v1's, but the canonical form wins
		"/v1/orders/": "refuse", // as strict as orders, which governs /v1/orders
		"/V1/Orders":  "refuse",
		"/v1/other":   "v1",
		"/v1/other/":  "v1",
		"/elsewhere":  "default",
		"/elsewhere/": "default",
	} {
		d := p.Decide(parseRequest(t, "POST "+target+" HTTP/1.1\r\nHost: x", ""))
		if got := decided(d); got != want {
			t.Errorf("with an enforcing /v1/: POST %s decided %s (%q), want %s", target, got, d.Refuse, want)
		}
	}

	// Only the defaults route besides: a declared route wins the tie.
	p = mustNew(t, orders)
	for target, want := range map[string]string{"/v1/orders": "orders", "/v1/orders/": "refuse", "/v1/orders/x": "default"} {
		d := p.Decide(parseRequest(t, "POST "+target+" HTTP/1.1\r\nHost: x", ""))
		if got := decided(d); got != want {
			t.Errorf("with optional defaults: POST %s decided %s (%q), want %s", target, got, d.Refuse, want)
		}
	}

	// Two required routes for the slash and slashless form: a passthrough
	// form of both cannot pick one.
	req := func(name, match string) Route {
		r := testRoute(name, match)
		r.Required = true
		return r
	}
	v1 := testRoute("v1", "/v1/")
	v1.Mode = ModePassthrough
	d := DefaultRoute()
	d.Mode = ModePassthrough
	p, err := New(d, []Route{req("a", "POST /v1/orders"), req("b", "POST /v1/orders/{$}"), v1})
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]string{"/v1/orders": "a", "/v1/orders/": "refuse", "/V1/Orders": "refuse", "/v1/orders;x": "refuse"} {
		d := p.Decide(parseRequest(t, "POST "+target+" HTTP/1.1\r\nHost: x", ""))
		if got := decided(d); got != want {
			t.Errorf("two required routes: POST %s decided %s (%q), want %s", target, got, d.Refuse, want)
		}
	}
}

// TestDecideSharedScope: routes that share a key scope (the default) keep
// one record per key, so a variant governed by another route exactly as
// strict needs no refusal: it is enforced under the route it matched, and
// the fingerprint (which covers the path) makes the same key on the other
// form a 422, never a second execution. A stricter variant still moves the
// request to the stricter route.
func TestDecideSharedScope(t *testing.T) {
	orders := sharedScopeRoute("orders", "POST /v1/orders")
	orders.Required = true
	tree := sharedScopeRoute("v1", "/v1/")
	p := mustNew(t, orders, tree)
	for target, want := range map[string]string{
		"/v1/orders":  "orders",
		"/v1/orders/": "orders", // stricter variant: enforced under orders
		"/V1/Orders":  "orders",
		"/v1/other/":  "v1",
	} {
		d := p.Decide(parseRequest(t, "POST "+target+" HTTP/1.1\r\nHost: x", ""))
		if got := decided(d); got != want {
			t.Errorf("shared scope: POST %s decided %s (%q), want %s", target, got, d.Refuse, want)
		}
	}
	a := sharedScopeRoute("a", "POST /v1/items")
	b := sharedScopeRoute("b", "POST /v1/items/{$}")
	p = mustNew(t, a, b)
	if d := p.Decide(parseRequest(t, "POST /v1/items/ HTTP/1.1\r\nHost: x", "")); decided(d) != "b" {
		t.Errorf("shared scope, equally strict routes: decided %s (%q), want b", decided(d), d.Refuse)
	}
}

func decided(d Decision) string {
	if d.Refuse != "" {
		return "refuse"
	}
	return d.Route.Name
}

// TestDecideCanonicalIsFree: a request in canonical form costs no
// allocation beyond Match's (whose ServeMux lookup allocates for subtree
// and not-found matches), so no extra match. A JSON body is one, unless a
// _method member could reach a route; a file extension is one, unless the
// path without it could belong to a stricter route.
func TestDecideCanonicalIsFree(t *testing.T) {
	p := variantPolicy(t)
	for _, target := range []string{"/v1/orders", "/v1/other", "/v1/other/", "/v1/items/a%20b", "/v1/payments/x", "/elsewhere", "/v1/Other/ABC", "/v1/items/ABC",
		"/v1/other.json", "/v1/items/7.json", "/v1/payments/x.pdf", "/elsewhere/a.b/c.d", "/v1/other/x.tar.gz"} {
		get := parseRequest(t, "GET "+target+"?q=a%20b&x=%2F HTTP/1.1\r\nHost: x", "")
		if n, match := testing.AllocsPerRun(100, func() { p.Decide(get) }), testing.AllocsPerRun(100, func() { p.Match(get) }); n != match {
			t.Errorf("GET %s with an escaped query: %v allocations per decision, want Match's %v", target, n, match)
		}
		r := parseRequest(t, "POST "+target+" HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Type: application/json", `{"_method":"PATCH"}`)
		if d := p.Decide(r); d.Refuse != "" || d.Route != d.Matched || d.NeedBody {
			t.Fatalf("%s: %+v", target, d)
		}
		match := testing.AllocsPerRun(100, func() { p.Match(r) })
		if n := testing.AllocsPerRun(100, func() { p.Decide(r) }); n != match {
			t.Errorf("%s: %v allocations per decision, want Match's %v", target, n, match)
		}
	}
}

// BenchmarkDecide compares Decide with Match alone on the same request:
// canonical requests should cost the same, variants pay for their matches.
func BenchmarkDecide(b *testing.B) {
	p := variantPolicy(b)
	const json = "\r\nContent-Type: application/json"
	for _, bc := range []struct{ name, head, body string }{
		{"canonical-enforced", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k" + json, ""},
		{"canonical-passthrough", "POST /v1/other HTTP/1.1\r\nHost: x" + json, ""},
		{"canonical-GET", "GET /v1/orders/42 HTTP/1.1\r\nHost: x", ""},
		{"canonical-json-enforced", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k" + json, `{"amount":1}`},
		{"canonical-json-passthrough", "POST /v1/other HTTP/1.1\r\nHost: x" + json, `{"amount":1}`},
		{"canonical-extension", "POST /v1/other/report.json HTTP/1.1\r\nHost: x" + json, `{"amount":1}`},
		{"variant-slash", "POST /v1/orders/ HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""},
		{"variant-case-params", "POST /V1/Orders;jsessionid=1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""},
		{"variant-encoded", "POST /v1/uploads/..%2F..%2Fv1%2Forders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""},
		{"variant-override", "GET /v1/legacy HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: PATCH", ""},
		{"variant-extension", "POST /v1/orders.json HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""},
		{"variant-double-encoded", "POST /v1%252Forders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""},
		{"variant-json-override", "POST /v1/legacy HTTP/1.1\r\nHost: x" + json, `{"_method":"PATCH"}`},
		{"variant-everything", "POST /V1%255C..;a/x%25252F..%5C.;b/Orders.%20/..%2e.JSON.;c/ HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""},
	} {
		r := parseRequest(b, bc.head, bc.body)
		b.Run(bc.name+"/match", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Match(r)
			}
		})
		b.Run(bc.name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(r)
			}
		})
	}
}

// FuzzDecide checks the invariant of the route decision against Match
// alone, with variants built here independently of Decide: for any request,
// unless the decision refuses it, no variant of it (path: decoded, decoded
// again up to three times in all, "\" as "/", ";" parameters stripped,
// trailing dots and spaces stripped from every segment, a ".ext" of the
// last segment removed, in lower case, with or without trailing slash;
// method: upper case, every override field in any letter case and with "_"
// for "-", _method in the query or in a form body, PHP's spellings of the
// name included, a body without Content-Type read as a form, a top-level
// _method member of a JSON body) is governed by a route stricter than the
// decision's route, and the decision is never weaker than the route the
// request matched.
func FuzzDecide(f *testing.F) {
	for _, s := range [][4]string{
		{"POST", "/v1/orders/", "", ""},
		{"POST", "/V1/Orders;jsessionid=1", "", ""},
		{"post", "/v1/payments", "", ""},
		{"POST", "/v1/items/..%2F..%2Fv1%2Forders", "", ""},
		{"GET", "/v1/legacy?_method=patch", "X-Http-Method-Override", "POST"},
		{"POST", "/v1/legacy", "Content-Type", "application/x-www-form-urlencoded\x00_method=PATCH"},
		{"PUT", "/v1\\legacy/", "X-Method-Override", "patch"},
		{"POST", "/v1/x/..;/orders", "", ""},
		{"POST", "/v1/%2e%2e/v1/orders", "", ""},
		{"POST", "/v1/legacy", "X-HTTP_Method_Override", "PATCH"},
		{"POST", "/v1/legacy", "X-Trace", "1\x00a=1&_method=PATCH"},
		{"POST", "/v1/legacy", "Content-Type", "application/json\x00{\"a\":[1],\"_method\":\"patch\"}"},
		{"POST", "/v1/legacy?.method=PATCH", "", ""},
		{"POST", "/v1/legacy", "Content-Type", "application/x-www-form-urlencoded\x00+method=PATCH"},
		{"POST", "/v1/orders.json", "", ""},
		{"POST", "/v1%252Forders", "", ""},
		{"POST", "/v1/orders%20", "", ""},
		{"POST", "/v1./Orders.xml.", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	p := variantPolicy(f)
	ex := exhaustivePolicy(p)
	f.Fuzz(func(t *testing.T, method, target, field, value string) {
		body := ""
		if before, after, ok := strings.Cut(value, "\x00"); ok {
			value, body = before, after
		}
		head := method + " " + target + " HTTP/1.1\r\nHost: x"
		if field != "" {
			head += "\r\n" + field + ": " + value
		}
		if body != "" {
			head += "\r\nContent-Length: " + itoa(len(body))
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head + "\r\n\r\n" + body)))
		if err != nil || len(body) > 9999 {
			return
		}
		// The body is what the request carries as parsed: a field name
		// holding a line break can end the header early, and then the
		// bytes after it are no body (nor a Content-Length) at all.
		carried, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		body = string(carried)
		d, full := p.Decide(r), ex.Decide(r)
		if d.NeedBody {
			d, full = p.DecideBody(r, []byte(body)), ex.DecideBody(r, []byte(body))
		}
		// Decide's shortcuts (fast path, rival and pattern shapes) decide
		// as matching every variant does.
		if d.Route != full.Route || d.Matched != full.Matched || d.Refuse != full.Refuse || d.NeedBody != full.NeedBody {
			t.Fatalf("%q: decided %s/%s %q %v, matching every variant %s/%s %q %v", head, d.Route.Name, d.Matched.Name, d.Refuse, d.NeedBody,
				full.Route.Name, full.Matched.Name, full.Refuse, full.NeedBody)
		}
		if d.Route == nil || d.Matched == nil {
			t.Fatalf("%q: decision without a route: %+v", head, d)
		}
		if d.Refuse != "" {
			return
		}
		s := d.Route.Strictness(r.Method)
		if m := p.Match(r); m.Strictness(r.Method) > s {
			t.Fatalf("%q: decided %s (%v), weaker than the matched route %s (%v)", head, d.Route.Name, s, m.Name, m.Strictness(r.Method))
		}
		for _, v := range independentVariants(r, []byte(body)) {
			if got := p.Match(v); got.Strictness(v.Method) > s {
				t.Fatalf("%q: decided %s (%v), but its variant %s %s is governed by %s (%v)",
					head, d.Route.Name, s, v.Method, v.URL.EscapedPath(), got.Name, got.Strictness(v.Method))
			}
		}
	})
}

// phpParamName returns the name PHP registers a request parameter under:
// read up to a NUL byte, leading spaces dropped (when trim; Decide also
// reads them as "_", so both count), " " and "." as "_", and at the first
// "[" either an array (a "]" follows: the name ends there) or "_" followed
// by the rest as sent.
func phpParamName(k string, trim bool) string {
	k, _, _ = strings.Cut(k, "\x00")
	if trim {
		k = strings.TrimLeft(k, " ")
	}
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case ' ', '.':
			b.WriteByte('_')
		case '[':
			if strings.Contains(k[i+1:], "]") {
				return b.String()
			}
			return b.String() + "_" + k[i+1:]
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// independentVariants builds the variants of r the way an upstream might
// read it, using only the standard library, for FuzzDecide.
func independentVariants(r *http.Request, body []byte) []*http.Request {
	methods := []string{r.Method, strings.ToUpper(r.Method)}
	addList := func(v string) {
		for _, m := range strings.Split(v, ",") {
			methods = append(methods, strings.ToUpper(strings.TrimSpace(m)))
		}
	}
	for name, vs := range r.Header {
		// As CGI names it: HTTP_ + upper case, "-" as "_".
		cgi := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if cgi == "X_HTTP_METHOD_OVERRIDE" || cgi == "X_HTTP_METHOD" || cgi == "X_METHOD_OVERRIDE" {
			for _, v := range vs {
				addList(v)
			}
		}
	}
	params := func(q url.Values) {
		for k, vs := range q {
			if k == "_method" || phpParamName(k, true) == "_method" || phpParamName(k, false) == "_method" {
				for _, v := range vs {
					methods = append(methods, strings.ToUpper(strings.TrimSpace(v)))
				}
			}
		}
	}
	q, _ := url.ParseQuery(r.URL.RawQuery) // pairs before a malformed one still count
	params(q)
	if r.Method != http.MethodGet && r.Method != http.MethodHead && len(body) > 0 {
		ct := strings.ToLower(r.Header.Get("Content-Type"))
		mt := strings.TrimSpace(strings.Split(ct, ";")[0])
		switch {
		case mt == "" || mt == "application/x-www-form-urlencoded":
			q, _ := url.ParseQuery(string(body))
			params(q)
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			var obj map[string]any
			if json.Unmarshal(body, &obj) == nil {
				if v, ok := obj["_method"].(string); ok {
					addList(v)
				}
			}
		}
	}

	bases := []string{r.URL.Path, r.URL.EscapedPath()}
	for i, d := 1, r.URL.Path; i < 3; i++ {
		next, err := url.PathUnescape(d)
		if err != nil || next == d {
			break
		}
		bases, d = append(bases, next), next
	}
	paths := map[string]bool{}
	for _, base := range bases {
		for _, bs := range []bool{false, true} {
			for _, semi := range []bool{false, true} {
				p := base
				if bs {
					p = strings.ReplaceAll(p, `\`, "/")
					p = strings.ReplaceAll(strings.ReplaceAll(p, "%5C", "/"), "%5c", "/")
				}
				if semi {
					segs := strings.Split(p, "/")
					for i, s := range segs {
						segs[i], _, _ = strings.Cut(s, ";")
					}
					p = strings.Join(segs, "/")
				}
				if p == "" || p[0] != '/' {
					p = "/" + p
				}
				for _, dots := range []bool{false, true} {
					for _, ext := range []bool{false, true} {
						t := p
						if dots {
							// Windows: trailing dots and spaces of each
							// name go; dot segments stay for Clean.
							segs := strings.Split(t, "/")
							for i, s := range segs {
								if s != "." && s != ".." {
									segs[i] = strings.TrimRight(s, ". ")
								}
							}
							t = strings.Join(segs, "/")
						}
						if ext {
							// Rails (.:format): a non-empty extension after
							// a stem that is not only dots.
							x := strings.TrimRight(t, "/")
							e := path.Ext(x)
							stem := strings.TrimSuffix(path.Base(x), e)
							if len(e) < 2 || strings.Trim(stem, ".") == "" {
								continue
							}
							t = strings.TrimSuffix(x, e)
						}
						for _, c := range []string{t, strings.ToLower(t)} {
							paths[c] = true
							if strings.HasSuffix(c, "/") {
								paths[strings.TrimRight(c, "/")] = true
							} else {
								paths[c+"/"] = true
							}
						}
					}
				}
			}
		}
	}
	var out []*http.Request
	for path := range paths {
		u, err := url.Parse(path)
		if err != nil || u.Path == "" || u.Host != "" || u.Scheme != "" || strings.ContainsAny(path, "?#") {
			// A decoded path is not always a valid escaped one: match it decoded.
			u = &url.URL{Path: path}
		}
		u.RawQuery = ""
		for _, m := range methods {
			if m == "" || r.Method == http.MethodConnect {
				continue
			}
			out = append(out, &http.Request{Method: m, Host: r.Host, URL: u, Header: http.Header{}})
		}
	}
	return out
}
