package policy

import (
	"bufio"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// exhaustivePolicy returns a copy of p whose Decide matches every variant
// (no fast path, no rival or shape shortcut): the rule the shortcuts must
// agree with.
func exhaustivePolicy(p *Policy) *Policy {
	q := *p
	q.exhaustive = true
	return &q
}

// shapesPolicy has what the 1,000-route shortcuts of Decide reason about:
// routes of several scopes whose patterns need segments past their literal
// prefix, host-bound routes, a subtree, a {rest...} route and one route without
// a method.
func shapesPolicy(t testing.TB) *Policy {
	t.Helper()
	opt := func(name, match, scope string, methods ...string) Route {
		r := DefaultRoute()
		r.Name, r.Match, r.Scope = name, match, scope
		if len(methods) > 0 {
			r.Methods = methods
		}
		return r
	}
	req := func(r Route) Route { r.Required = true; return r }
	docs := opt("docs", "/v1/docs/", "d")
	docs.Mode = ModePassthrough
	p, err := New(DefaultRoute(), []Route{
		opt("create", "POST /v1/svc00/res0", "a"),
		opt("update", "PATCH /v1/svc00/res0/{id}", "b"),
		req(opt("delete", "DELETE /v1/svc00/res0/{id}", "c", "DELETE")),
		opt("action", "POST /v1/svc00/res0/{id}/actions/{action}", "a"),
		req(opt("hosted", "PUT api1.example.com/v1/svc00/res1", "h", "PUT")),
		opt("hosted-patch", "PATCH api2.example.com/v1/svc00/res1/{id}", "h2"),
		opt("rest", "PATCH /v1/svc01/{rest...}", "r"),
		opt("tree", "/v1/svc02/", "t", "POST", "PATCH", "PUT"),
		opt("exact", "PUT /v1/svc00/res2/{$}", "e", "PUT"),
		docs,
		req(opt("inner", "PATCH /v1/docs/inner/", "i")),
		opt("doc", "DELETE /v1/docs/{id}", "d", "DELETE"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDecideShortcutsAgreeWithExhaustive is the property of the shortcuts
// Decide takes past its first match (path variants skipped when no rival
// reaches them, override methods skipped when no rival or no pattern
// reaches them): over random requests near the 1,000 routes and the shape
// policy, with and without a JSON body naming another method, the decision
// (and DecideBody's) equals the one that matches every variant.
func TestDecideShortcutsAgreeWithExhaustive(t *testing.T) {
	big, _, bigTargets := bigPolicy(t)
	shapeTargets := []string{}
	for _, path := range []string{"/v1/svc00/res0", "/v1/svc00/res0/42", "/v1/svc00/res0/42/actions/refund",
		"/v1/svc00/res1", "/v1/svc00/res1/42", "/v1/svc01", "/v1/svc01/x", "/v1/svc02", "/v1/svc02/a/b",
		"/v1/svc00/res2", "/v1/svc00/res2/", "/v1/other", "/v1/docs", "/v1/docs/a", "/v1/docs/a/b", "/v1/docs/inner",
		"/v1/docs/inner/x", "/v1/docs/inner.json", "/v1/orders", "/v1/payments/x", "/v1/items/7", "/v1/legacy", "/elsewhere"} {
		for _, m := range []string{"POST", "PATCH", "PUT", "DELETE"} {
			shapeTargets = append(shapeTargets, m+" "+path+" HTTP/1.1\r\nHost: x")
		}
	}
	hosts := []string{"x", "API1.example.com", "api2.example.com:8443", "api1.example.com.", "API0.example.com"}
	bodies := []string{"", `{"amount":1}`, `{"_method":"PATCH"}`, `{"_method":"DELETE"}`, `{"_method":"PUT"}`, `{"_method":"POST"}`}
	rng := rand.New(rand.NewPCG(17, 3))
	for _, c := range []struct {
		p       *Policy
		targets []string
	}{{big, bigTargets}, {shapesPolicy(t), shapeTargets}, {variantPolicy(t), bigTargets}, {variantPolicy(t), shapeTargets}} {
		ex := exhaustivePolicy(c.p)
		for range 20000 {
			line := randomTarget(rng, c.targets)
			head := line + " HTTP/1.1\r\nHost: " + hosts[rng.IntN(len(hosts))] + "\r\nContent-Type: application/json"
			if rng.IntN(2) == 0 {
				head += "\r\nIdempotency-Key: k"
			}
			body := bodies[rng.IntN(len(bodies))]
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head + "\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body)))
			if err != nil {
				continue
			}
			for _, withBody := range []bool{false, true} {
				got, want := c.p.Decide(r), ex.Decide(r)
				if withBody {
					got, want = c.p.DecideBody(r, []byte(body)), ex.DecideBody(r, []byte(body))
				}
				if got.Route.Name != want.Route.Name || got.Matched.Name != want.Matched.Name || got.Refuse != want.Refuse || got.NeedBody != want.NeedBody {
					t.Fatalf("%q body %q (DecideBody %v): fast %s/%s %q %v, exhaustive %s/%s %q %v", head, body, withBody,
						got.Route.Name, got.Matched.Name, got.Refuse, got.NeedBody, want.Route.Name, want.Matched.Name, want.Refuse, want.NeedBody)
				}
			}
		}
	}
}

// TestShapeSetReaches pins the edge cases of the pattern shapes: a
// wildcard needs a segment, "{rest...}" and "{$}" none, letter case,
// trailing dots and extensions are variants, a host pattern counts only on
// a host that contains it, and a non-ASCII path is always reached.
func TestShapeSetReaches(t *testing.T) {
	s := &shapeSet{need: map[string]int{}}
	for _, pat := range []string{"PATCH /v1/orders/{id}", "PATCH /v1/items/{id}/actions/{a}", "/v1/files/{p...}",
		"PATCH /v1/exact/{$}", "PATCH api.example.com/v1/hosted/{id}"} {
		s.add(pat, true)
	}
	for _, c := range []struct {
		host, path string
		want       bool
	}{
		{"x", "/v1/orders", false},
		{"x", "/v1/orders/", false},
		{"x", "/v1/orders/42", true},
		{"x", "/V1/ORDERS/42", true},
		{"x", "/v1/orders./42", true},     // IIS reads it as /v1/orders/42
		{"x", "/v1/orders/42.json", true}, // Rails too
		{"x", "/v1/orders/.../", true},    // "..." fills {id} as sent
		{"x", "/v1/items/42", false},
		{"x", "/v1/items/42/actions/x", true},
		{"x", "/v1/files", true},
		{"x", "/v1/exact", true},
		{"x", "/v1/ordersx/42", false},
		{"x", "/v1/hosted/42", false},
		{"API.example.com", "/v1/hosted/42", true},
		{"api.example.com:8443", "/v1/hosted/42", true},
		{"api.example.com", "/v1/hosted", false},
		{"x", "/v1/ſomething", true},
		{"x", "/v1/orders/" + strings.Repeat("a", maxIndexedPath), true},
	} {
		if got := s.reaches(c.host, c.path); got != c.want {
			t.Errorf("reaches(%q, %q) = %v, want %v", c.host, c.path, got, c.want)
		}
	}
	for pat, want := range map[string]int{"/a/{id}": 1, "/a/{id}/b/{c}": 3, "/a/{rest...}": 0, "/a/{$}": 0, "/a/{id}/": 1, "/a/b": 0} {
		if got := segmentsNeeded(pat); got != want {
			t.Errorf("segmentsNeeded(%q) = %d, want %d", pat, got, want)
		}
	}
	if all := (&shapeSet{need: map[string]int{}}); func() bool { all.add("/{rest...}", true); return !all.reaches("x", "/anything") }() {
		t.Error(`a "/{rest...}" pattern must reach every path`)
	}
}

// TestDecideMiddleRouteNeedsBody pins what the benchmark's middle request
// decides, now without matching its variants: a _method of PATCH would put
// it under the defaults route (another scope, as strict), so the body is
// read; with that body it is refused, with a plain one it passes.
func TestDecideMiddleRouteNeedsBody(t *testing.T) {
	p, routes, targets := bigPolicy(t)
	head := targets[500] + "\r\nContent-Type: application/json"
	d := p.Decide(parseRequest(t, head, `{"amount":1}`))
	if !d.NeedBody || d.Refuse != "" || d.Route.Name != routes[500].Name {
		t.Fatalf("Decide: %+v, want NeedBody under %s", d, routes[500].Name)
	}
	if d := p.DecideBody(parseRequest(t, head, `{"_method":"PATCH"}`), []byte(`{"_method":"PATCH"}`)); d.Refuse == "" {
		t.Errorf("DecideBody with _method PATCH passed: %+v", d)
	}
	if d := p.DecideBody(parseRequest(t, head, `{"amount":1}`), []byte(`{"amount":1}`)); d.Refuse != "" {
		t.Errorf("DecideBody with a plain body refused: %s", d.Refuse)
	}

}

// TestDecideRequiredRouteReadsOverrideBody pins the fix to Decide's fast
// path: a keyed JSON request to a required route (svc00, its own scope)
// whose _method could name PATCH, which the defaults route enforces with an
// optional key in another scope, must have its body read; with
// {"_method":"PATCH"} it is refused. Before, the fast path counted only
// routes at least as strict, so the request passed unread: enforced under
// svc00's scope while the upstream ran PATCH, and the same PATCH sent
// plainly with the same key was claimed afresh in the default scope and
// ran again (promise 1).
func TestDecideRequiredRouteReadsOverrideBody(t *testing.T) {
	p, routes, targets := bigPolicy(t)
	head := targets[0] + "\r\nIdempotency-Key: k\r\nContent-Type: application/json"
	if !routes[0].Required {
		t.Fatal("the first route must be required")
	}
	d := p.Decide(parseRequest(t, head, `{"amount":1}`))
	if !d.NeedBody || d.Refuse != "" {
		t.Fatalf("Decide: NeedBody %v, refuse %q; want the body read", d.NeedBody, d.Refuse)
	}
	body := `{"_method":"PATCH","amount":1}`
	if d := p.DecideBody(parseRequest(t, head, body), []byte(body)); d.Refuse == "" {
		t.Errorf("DecideBody with _method PATCH passed under %s", d.Route.Name)
	}
	plain := p.Decide(parseRequest(t, "PATCH /v1/svc00/res0 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k", ""))
	if plain.Route.Scope == routes[0].Scope || plain.Route.Strictness("PATCH") == NotEnforced {
		t.Fatalf("PATCH /v1/svc00/res0 decided %s (scope %q): the test needs it enforced in another scope", plain.Route.Name, plain.Route.Scope)
	}
}
