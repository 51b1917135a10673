package policy

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
)

// testRoute returns a route named name with the default settings and its
// own key scope (named like the route), so that tests of the variant rules
// see routes whose records are kept apart; sharedScopeRoute keeps the
// default shared scope.
func testRoute(name, match string) Route {
	r := DefaultRoute()
	r.Name, r.Match, r.Scope = name, match, name
	return r
}

func sharedScopeRoute(name, match string) Route {
	r := DefaultRoute()
	r.Name, r.Match = name, match
	return r
}

func mustNew(t *testing.T, routes ...Route) *Policy {
	t.Helper()
	p, err := New(DefaultRoute(), routes)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func TestMatchPrecedence(t *testing.T) {
	get := testRoute("get-item", "GET /v1/items/{id}")
	get.Methods = []string{"GET", "HEAD", "POST"}
	p := mustNew(t,
		testRoute("orders-any", "/v1/orders"),
		testRoute("orders-post", "POST /v1/orders"),
		testRoute("v1-tree", "/v1/"),
		testRoute("payments-tree", "/v1/payments/"),
		testRoute("capture", "POST /v1/payments/{id}/capture"),
		testRoute("capture-special", "POST /v1/payments/special/capture"),
		testRoute("uploads", "/v1/uploads/"),
		testRoute("host-orders", "api.example.com/v1/orders"),
		testRoute("exact-root", "/{$}"),
		get,
	)
	tests := []struct {
		method, target, host, want string
	}{
		{"POST", "/v1/orders", "", "orders-post"},                       // method-specific beats generic
		{"PATCH", "/v1/orders", "", "orders-any"},                       // generic catches other methods
		{"POST", "/v1/orders", "api.example.com", "host-orders"},        // host pattern wins over "/v1/orders"... by host
		{"POST", "/v1/payments/42/capture", "", "capture"},              // wildcard beats subtree
		{"POST", "/v1/payments/special/capture", "", "capture-special"}, // literal beats {wildcard}
		{"PATCH", "/v1/payments/42/capture", "", "payments-tree"},       // method mismatch falls to subtree
		{"POST", "/v1/payments/42", "", "payments-tree"},                // longer subtree beats shorter
		{"POST", "/v1/other", "", "v1-tree"},
		{"POST", "/v1/uploads/a/b", "", "uploads"}, // trailing-slash subtree
		{"POST", "/v1/uploads/", "", "uploads"},
		{"POST", "/v1/uploads", "", "default"}, // ServeMux only redirects it to the /v1/uploads/ subtree
		{"POST", "/", "", "exact-root"},
		{"POST", "/elsewhere", "", "default"},
		{"POST", "/v1/payments/42/../43/capture", "", "capture"}, // matched after path cleaning
		{"POST", "/v1//orders", "", "orders-post"},
		{"GET", "/v1/items/7", "", "get-item"},
		{"HEAD", "/v1/items/7", "", "get-item"}, // GET patterns also match HEAD
		{"POST", "/v1/items/7", "", "v1-tree"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.target, nil)
		if tt.host != "" {
			req.Host = tt.host
		}
		got := p.Match(req)
		if got == nil || got.Name != tt.want {
			t.Errorf("%s %s (host %q) matched %v, want %s", tt.method, tt.target, tt.host, got, tt.want)
		}
	}
	if r := p.Match(httptest.NewRequest("GET", "/v1/items/7", nil)); !slices.Equal(r.Methods, []string{"GET", "HEAD"}) {
		t.Errorf("GET pattern narrowed methods to %v, want [GET HEAD]", r.Methods)
	}
	if r := p.Match(httptest.NewRequest("POST", "/v1/orders", nil)); !slices.Equal(r.Methods, []string{"POST"}) {
		t.Errorf("POST pattern narrowed methods to %v, want [POST]", r.Methods)
	}
}

func TestMatchNoRedirectRoute(t *testing.T) {
	// Only a subtree: ServeMux would redirect /uploads to /uploads/ and clean
	// /a/../uploads; Match must never hand out a redirect, only routes or
	// the defaults route.
	p := mustNew(t, testRoute("uploads", "/uploads/"))
	for _, target := range []string{"/uploads", "/x", "/uploads/../x", "/%2e%2e/x"} {
		if r := p.Match(httptest.NewRequest("POST", target, nil)); r.Name != "default" {
			t.Errorf("%s matched %s, want default", target, r.Name)
		}
	}
	if r := p.Match(httptest.NewRequest("POST", "/x/../uploads/a", nil)); r.Name != "uploads" {
		t.Errorf("cleaned path matched %s, want uploads", r.Name)
	}
	empty := mustNew(t)
	if r := empty.Match(httptest.NewRequest("POST", "/", nil)); r == nil || r.Name != "default" || r.Match != "" {
		t.Errorf("no routes: matched %+v, want the defaults route", r)
	}
	if r := p.Match(nil); r == nil || r.Name != "default" {
		t.Error("nil request did not get the defaults route")
	}
}

func TestMatchConcurrent(t *testing.T) {
	p := mustNew(t, testRoute("a", "POST /a"), testRoute("b", "/b/"))
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 200; i++ {
				if p.Match(httptest.NewRequest("POST", "/a", nil)).Name != "a" {
					t.Error("concurrent match failed")
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

func TestNewErrors(t *testing.T) {
	mod := func(name, match string, f func(*Route)) Route {
		r := testRoute(name, match)
		if f != nil {
			f(&r)
		}
		return r
	}
	tests := []struct {
		name   string
		routes []Route
		path   string
		says   string
	}{
		{"bad name", []Route{mod("Bad_Name", "/a", nil)}, "routes[0].name", "must match"},
		{"reserved name", []Route{mod("default", "/a", nil)}, "routes[0].name", "reserved"},
		{"duplicate name", []Route{mod("a", "/a", nil), mod("a", "/b", nil)}, "routes[1].name", "already the name of routes[0]"},
		{"missing match", []Route{mod("a", "", nil)}, "routes[0].match", "required"},
		{"invalid pattern", []Route{mod("a", "/a/{", nil)}, "routes[0].match", "invalid pattern"},
		{"duplicate wildcard", []Route{mod("a", "/a/{x}/{x}", nil)}, "routes[0].match", "invalid pattern"},
		{"no path", []Route{mod("a", "POST", nil)}, "routes[0].match", "invalid pattern"},
		{"duplicate pattern", []Route{mod("a", "POST /a", nil), mod("b", "POST /a", nil)}, "routes[1].match", "conflicts with routes[0] (a)"},
		{"conflicting wildcards", []Route{mod("a", "/x/{id}/a", nil), mod("b", "/{y}/z/", nil), mod("c", "/v/{id}/b", nil)}, "routes[1].match", "conflicts with routes[0] (a)"},
		{"method outside methods", []Route{mod("a", "PUT /a", nil)}, "routes[0].match", "PUT is not among methods"},
		{"mode", []Route{mod("a", "/a", func(r *Route) { r.Mode = "off" })}, "routes[0].mode", "enforce or passthrough"},
		{"header", []Route{mod("a", "/a", func(r *Route) { r.Header = "Bad Header" })}, "routes[0].header", "valid field name"},
		{"no methods", []Route{mod("a", "/a", func(r *Route) { r.Methods = nil })}, "routes[0].methods", "at least one"},
		{"lowercase method", []Route{mod("a", "/a", func(r *Route) { r.Methods = []string{"post"} })}, "routes[0].methods", "upper case"},
		{"bad method", []Route{mod("a", "/a", func(r *Route) { r.Methods = []string{"PO ST"} })}, "routes[0].methods", "valid method"},
		{"owner none", []Route{mod("a", "/a", func(r *Route) { r.Owner = identity.OwnerSource{Kind: identity.OwnerNone} })}, "routes[0].owner", "allow_global_keys"},
		{"owner kind", []Route{mod("a", "/a", func(r *Route) { r.Owner = identity.OwnerSource{Kind: "ip"} })}, "routes[0].owner", "unknown owner"},
		{"fingerprint header", []Route{mod("a", "/a", func(r *Route) { r.Fingerprint.Headers = []string{"a b"} })}, "routes[0].fingerprint.headers", "valid field name"},
		{"bare-word host", []Route{mod("orders", "POST v1/orders", nil)}, "routes[0].match", `route "orders": pattern "POST v1/orders" reads as host "v1" and path "/orders", and no request carries a host without a dot: if "v1" is part of the path, write "POST /v1/orders"`},
		{"bare-word host without method", []Route{mod("orders", "api/v1/orders", nil)}, "routes[0].match", `write "/api/v1/orders"`},
		{"fingerprint accept-encoding", []Route{mod("a", "/a", func(r *Route) { r.Fingerprint.Headers = []string{"Accept-Encoding"} })}, "routes[0].fingerprint.headers", "must not be fingerprinted"},
		{"fingerprint body", []Route{mod("a", "/a", func(r *Route) { r.Fingerprint.Body = "xml" })}, "routes[0].fingerprint.body", "raw, json, protobuf or ignore"},
		{"lease", []Route{mod("a", "/a", func(r *Route) { r.Lease = 0 })}, "routes[0].lease", "> 0"},
		{"retention", []Route{mod("a", "/a", func(r *Route) { r.Retention = -1 })}, "routes[0].retention", ">= 0"},
		{"concurrent", []Route{mod("a", "/a", func(r *Route) { r.Concurrent = "queue" })}, "routes[0].concurrent", "wait or conflict"},
		{"wait timeout", []Route{mod("a", "/a", func(r *Route) { r.WaitTimeout = 0 })}, "routes[0].wait_timeout", "> 0"},
		{"no statuses", []Route{mod("a", "/a", func(r *Route) { r.ReplayStatuses = nil })}, "routes[0].replay_statuses", "at least one"},
		{"status range", []Route{mod("a", "/a", func(r *Route) { r.ReplayStatuses = []StatusRange{{600, 600}} })}, "routes[0].replay_statuses", "100-599"},
		{"request bytes", []Route{mod("a", "/a", func(r *Route) { r.MaxRequestBytes = 0 })}, "routes[0].max_request_bytes", "> 0"},
		{"response bytes", []Route{mod("a", "/a", func(r *Route) { r.MaxResponseBytes = -1 })}, "routes[0].max_response_bytes", "> 0"},
		{"store error", []Route{mod("a", "/a", func(r *Route) { r.OnStoreError = "ignore" })}, "routes[0].on_store_error", "fail_closed or fail_open"},
		{"abandoned", []Route{mod("a", "/a", func(r *Route) { r.OnAbandoned = "retry" })}, "routes[0].on_abandoned", "takeover or reject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(DefaultRoute(), tt.routes)
			if err == nil {
				t.Fatalf("New = %v, want an error at %s", p, tt.path)
			}
			var found bool
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var fe *FieldError
				if errors.As(e, &fe) && fe.Path == tt.path && strings.Contains(fe.Error(), tt.says) {
					found = true
				}
			}
			if !found {
				t.Fatalf("error %q has no problem at %s saying %q", err, tt.path, tt.says)
			}
		})
	}

	// Every problem at once, and the defaults route is named "defaults".
	d := DefaultRoute()
	d.Lease = 0
	_, err := New(d, []Route{mod("A", "/a/{", nil), mod("b", "/b", func(r *Route) { r.Retention = -1 })})
	for _, want := range []string{"defaults.lease", "routes[0].name", "routes[0].match", "routes[1].retention"} {
		if err == nil || !strings.Contains(err.Error(), want+": ") {
			t.Errorf("error %v does not report %s", err, want)
		}
	}
}

func TestNewNormalizesAndCopies(t *testing.T) {
	r := testRoute("a", "/a")
	r.Header = "idempotency-key"
	r.Methods = []string{"POST", "POST", "PUT"}
	r.Fingerprint.Headers = []string{"X-B", "x-a", "X-A"}
	d := DefaultRoute()
	d.Name, d.Match = "ignored", "/ignored"
	p, err := New(d, []Route{r})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Routes()
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "default" || got[1].Match != "" {
		t.Fatalf("Routes = %v", got)
	}
	if got[0].Header != "Idempotency-Key" {
		t.Errorf("Header = %q, want canonical", got[0].Header)
	}
	if !slices.Equal(got[0].Methods, []string{"POST", "PUT"}) {
		t.Errorf("Methods = %v", got[0].Methods)
	}
	if !slices.Equal(got[0].Fingerprint.Headers, []string{"x-a", "x-b"}) {
		t.Errorf("fingerprint headers = %v, want lowercased, sorted, deduplicated", got[0].Fingerprint.Headers)
	}
	r.Methods[0] = "DELETE"
	if got[0].Methods[0] != "POST" {
		t.Error("the policy shares the caller's slice")
	}
}

func TestEnforcesAndReplayable(t *testing.T) {
	r := testRoute("a", "/a")
	r.ReplayStatuses = []StatusRange{{200, 299}, {409, 409}}
	if !r.Enforces("POST") || !r.Enforces("PATCH") || r.Enforces("GET") || r.Enforces("post") {
		t.Error("Enforces does not follow methods")
	}
	r.Mode = ModePassthrough
	if r.Enforces("POST") {
		t.Error("a passthrough route enforces")
	}
	for status, want := range map[int]bool{200: true, 201: true, 299: true, 300: false, 199: false, 409: true, 410: false, 500: false} {
		if r.Replayable(status) != want {
			t.Errorf("Replayable(%d) = %v", status, !want)
		}
	}
}

func TestParseStatus(t *testing.T) {
	for in, want := range map[string]StatusRange{"2xx": {200, 299}, "5XX": {500, 599}, "1xx": {100, 199}, "409": {409, 409}, "100": {100, 100}, "599": {599, 599}} {
		if got, err := ParseStatus(in); err != nil || got != want {
			t.Errorf("ParseStatus(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"6xx", "0xx", "99", "600", "2x", "abc", "", "2xxx", "-200"} {
		if got, err := ParseStatus(in); err == nil {
			t.Errorf("ParseStatus(%q) = %v; want an error", in, got)
		}
	}
	for in, want := range map[StatusRange]string{{200, 299}: "2xx", {409, 409}: "409", {200, 204}: "200-204"} {
		if in.String() != want {
			t.Errorf("%v.String() = %q, want %q", in, in.String(), want)
		}
	}
}

func TestDescribe(t *testing.T) {
	r := testRoute("capture-payment", "POST /v1/payments/{id}/capture")
	r.Fingerprint.Body = fingerprint.BodyJSON
	r.Retention = 0
	r.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
	r.ReplayStatuses = []StatusRange{{200, 299}, {409, 409}}
	p := mustNew(t, r)
	var buf bytes.Buffer
	if err := p.Describe(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"- name: \"capture-payment\"\n  match: \"POST /v1/payments/{id}/capture\"\n",
		"  methods: [POST]\n",
		"  owner: \"header:X-User\"\n",
		"  fingerprint: {headers: [content-type], query: true, body: json, media_types: exact}\n",
		"  retention: 0s # completed records are kept forever\n",
		"  replay_statuses: [\"2xx\", \"409\"]\n",
		"  unknown_statuses: [] # any status not replayed releases the key: a retry runs again\n",
		"- name: \"default\"\n  match: \"\"\n",
		"  methods: [POST, PATCH]\n",
		"  max_request_bytes: 1048576\n",
		"  on_abandoned: reject\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Describe output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "capture-payment") > strings.Index(out, "\"default\"") {
		t.Error("defaults route is not last")
	}
	if err := p.Describe(failWriter{}); err == nil {
		t.Error("Describe hid a write error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
