package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/identity"
)

func TestFingerprintExcludeAndKeySection(t *testing.T) {
	c := mustParse(t, base+`defaults:
  owner: none
  allow_global_keys: true
routes:
  - name: orders
    match: "POST /v1/orders"
    fingerprint: {body: json, exclude: ["/meta/request_id", "/client_ts"]}
  - name: github
    match: "POST /hooks/github"
    scope: github
    key: {from: header, name: X-GitHub-Delivery}
  - name: stripe
    match: "POST /hooks/stripe"
    scope: stripe
    key: {from: body, pointer: /id}
`)
	if got := route(t, c, "orders").Fingerprint.Exclude; !reflect.DeepEqual(got, []string{"/client_ts", "/meta/request_id"}) {
		t.Errorf("exclude = %q", got)
	}
	if r := route(t, c, "github"); r.Header != "X-Github-Delivery" || r.Key.From != identity.KeyFromHeader {
		t.Errorf("github key: header %q, %+v", r.Header, r.Key)
	}
	if r := route(t, c, "stripe"); r.Key != (identity.KeySource{From: identity.KeyFromBody, Pointer: "/id"}) {
		t.Errorf("stripe key: %+v", r.Key)
	}
	if r := route(t, c, "default"); r.Header != "Idempotency-Key" || r.Key.From != identity.KeyFromHeader {
		t.Errorf("default key: %q %+v", r.Header, r.Key)
	}
}

func TestFingerprintExcludeAndKeyErrors(t *testing.T) {
	for _, c := range []struct{ yaml, says string }{
		{"routes: [{name: a, match: /a, fingerprint: {exclude: [/x]}}]\n", "routes[0].fingerprint.exclude: removes members of a JSON body and needs fingerprint.body: json"},
		{"routes: [{name: a, match: /a, fingerprint: {body: json, exclude: [x]}}]\n", `routes[0].fingerprint.exclude: invalid JSON pointer: "x"`},
		{"defaults: {fingerprint: {body: json, exclude: ['/a~2']}}\n", "defaults.fingerprint.exclude: invalid JSON pointer"},
		{"routes: [{name: a, match: /a, key: {from: body}}]\n", "routes[0].key.pointer: is required"},
		{"routes: [{name: a, match: /a, key: {from: body, pointer: /id, name: X-Id}}]\n", "routes[0].key.name: applies only with key.from: header"},
		{"routes: [{name: a, match: /a, header: X-A, key: {name: X-B}}]\n", "routes[0].key.name: \"X-B\" and header \"X-A\""},
		{"routes: [{name: a, match: /a, key: {from: cookie}}]\n", `routes[0].key.from: "cookie" must be header or body`},
		{"routes: [{name: a, match: /a, key: {pointer: /id}}]\n", "routes[0].key.pointer: applies only with key.from: body"},
		{"routes: [{name: a, match: /a, key: {frm: body}}]\n", "routes[0].key.frm: unknown key"},
	} {
		_, err := Load(writeFile(t, base+c.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.says)
		}
	}
}

// TestKeySectionInheritance: a route setting key.from starts a new source,
// so a header key does not inherit the defaults' body pointer.
func TestKeySectionInheritance(t *testing.T) {
	c := mustParse(t, base+`defaults:
  key: {from: body, pointer: /id}
routes:
  - name: gh
    match: "POST /gh"
    key: {from: header, name: X-GitHub-Delivery}
  - name: other
    match: "POST /other"
`)
	if r := route(t, c, "gh"); r.Key != (identity.KeySource{From: identity.KeyFromHeader}) || r.Header != "X-Github-Delivery" {
		t.Errorf("gh: %+v %q", r.Key, r.Header)
	}
	if r := route(t, c, "other"); r.Key != (identity.KeySource{From: identity.KeyFromBody, Pointer: "/id"}) {
		t.Errorf("other: %+v", r.Key)
	}
}

// TestREADMEDocumentsEveryRouteKey keeps README.md's configuration
// reference complete: every route policy key the loader knows is named
// there in backticks, by its path (fingerprint.exclude) or, inside a
// section described in one row, by its last part (jwt's jwks_file).
func TestREADMEDocumentsEveryRouteKey(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, k := range keyPaths(reflect.TypeFor[rawRoute](), "") {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(text, "`"+k+"`") && !strings.Contains(text, "`"+leaf+"`") {
			t.Errorf("README.md does not document the route key %s", k)
		}
	}
}
