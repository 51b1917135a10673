package policy

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy/fingerprint"
)

// TestAttackMatchHostIsCaseInsensitive: host names are case-insensitive and
// a fully qualified name may end in a dot (RFC 3986 section 3.2.2, RFC 1034
// section 3.1), so "API.Example.COM" and "api.example.com." name the host
// of a host-specific route. Matched byte for byte, any such variant fell
// through to the defaults route, skipping the route's enforcement while the
// upstream, which gets the host in X-Forwarded-Host, served the same host.
func TestAttackMatchHostIsCaseInsensitive(t *testing.T) {
	p := mustNew(t, testRoute("api", "POST api.example.com/v1/orders"), testRoute("shop", "POST Shop.Example.com/v1/orders"))
	for host, want := range map[string]string{
		"api.example.com":         "api",
		"API.Example.COM":         "api",
		"api.example.com.":        "api",
		"API.EXAMPLE.COM.:8443":   "api",
		"api.example.com:8443":    "api",
		"shop.example.com":        "shop",
		"SHOP.example.com.":       "shop",
		"other.example.com":       "default",
		"api.example.com..":       "default",
		"[::1]:8080":              "default",
		"api.example.com.evil.io": "default",
	} {
		req := httptest.NewRequest("POST", "/v1/orders", nil)
		req.Host = host
		if got := p.Match(req).Name; got != want {
			t.Errorf("host %q matched %s, want %s", host, got, want)
		}
	}
	if got := p.Routes()[1].Match; got != "POST Shop.Example.com/v1/orders" {
		t.Errorf("route keeps its pattern as written, got %q", got)
	}
}

// TestAttackSubMillisecondDurations: the stores keep leases and retentions in
// whole milliseconds. A lease under 1ms validated, then every Claim on the
// route failed (503 on every request, or with on_store_error: fail_open every
// request forwarded unprotected, duplicates included); a retention under 1ms
// became 0, which means "keep forever".
func TestAttackSubMillisecondDurations(t *testing.T) {
	for name, f := range map[string]func(*Route){
		"lease":     func(r *Route) { r.Lease = 500 * time.Microsecond },
		"retention": func(r *Route) { r.Retention = time.Microsecond },
	} {
		r := testRoute("a", "/a")
		f(&r)
		_, err := New(DefaultRoute(), []Route{r})
		if err == nil || !strings.Contains(err.Error(), "routes[0]."+name) || !strings.Contains(err.Error(), "1ms") {
			t.Errorf("%s under 1ms: New returned %v, want a routes[0].%s error naming 1ms", name, err, name)
		}
	}
	r := testRoute("a", "/a")
	r.Lease, r.Retention = time.Millisecond, 0
	if _, err := New(DefaultRoute(), []Route{r}); err != nil {
		t.Errorf("lease 1ms and retention 0 are valid: %v", err)
	}
}

// TestAttackHostInFingerprintHeaders: net/http moves the Host field out of
// Request.Header into Request.Host, so `fingerprint.headers: [Host]` read
// an absent header for every request and two requests for different hosts
// (tenants, for an upstream that routes on X-Forwarded-Host) shared a
// fingerprint: one got the other's response replayed.
func TestAttackHostInFingerprintHeaders(t *testing.T) {
	r := testRoute("a", "/a")
	r.Fingerprint.Headers = []string{"Host", "Content-Type"}
	p := mustNew(t, r)
	route := p.Routes()[0]
	a := httptest.NewRequest("POST", "/a", nil)
	a.Host = "tenant-a.example.com"
	b := httptest.NewRequest("POST", "/a", nil)
	b.Host = "tenant-b.example.com"
	if route.FingerprintOf(a, nil) == route.FingerprintOf(b, nil) {
		t.Error("requests for two hosts share a fingerprint although Host is a fingerprint header")
	}
	want := fingerprint.Of(fingerprint.Input{Method: "POST", Path: "/a", IncludeQuery: true,
		Headers: []fingerprint.Header{{Name: "content-type"}, {Name: "host", Values: []string{"tenant-a.example.com"}}}, BodyMode: fingerprint.BodyRaw})
	if got := route.FingerprintOf(a, nil); got != want {
		t.Errorf("FingerprintOf = %s, want the hs1 fingerprint with the Host value as one field line: %s", got, want)
	}
}

// TestAttackStoredResponseLimit: a max_response_bytes beyond what Valkey
// accepts as one value (proto-max-bulk-len, 512MB by default) validated;
// a response that large could not be completed, so its claim ran out and a
// retry ran the operation a second time.
func TestAttackStoredResponseLimit(t *testing.T) {
	r := testRoute("a", "/a")
	r.MaxResponseBytes = 1 << 30
	if _, err := New(DefaultRoute(), []Route{r}); err == nil || !strings.Contains(err.Error(), "routes[0].max_response_bytes") {
		t.Errorf("max_response_bytes 1GiB: New returned %v, want a routes[0].max_response_bytes error", err)
	}
	r.MaxResponseBytes = 256 << 20
	if _, err := New(DefaultRoute(), []Route{r}); err != nil {
		t.Errorf("max_response_bytes 256MiB is valid: %v", err)
	}
}

// TestAttackJSONFingerprintEdgeCases: under body: json, bodies that a JSON
// parser may read differently must not share a fingerprint: duplicate
// member names (first-wins and last-wins parsers disagree), lone surrogate
// escapes (decoders substitute U+FFFD differently), a byte order mark,
// numbers beyond a double. Bodies the hs1 format merges on purpose
// (RFC 8785: member order, whitespace, escapes, 1.0 = 1, -0 = 0) are listed
// as the documented behaviour; an upstream that parses 1.0 into an integer
// field differently from 1 gets the replay of the other form.
func TestAttackJSONFingerprintEdgeCases(t *testing.T) {
	fp := func(body string) string {
		return fingerprint.Of(fingerprint.Input{Method: "POST", Path: "/a", BodyMode: fingerprint.BodyJSON, Body: []byte(body)})
	}
	for _, pair := range [][2]string{
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"a":1,"a":2}`, `{"a":1}`},
		{`{"a":1,"a":2}`, `{"a":2,"a":1}`},
		{`"\ud800"`, `"\ufffd"`},
		{`"\ud800"`, `"\udc00"`},
		{"\ufeff{}", "{}"},
		{`[9007199254740993]`, `[9007199254740992]`},
		{`[1e400]`, `[1e401]`},
		{`[1e-400]`, `[0]`},
		{`[0.1000000000000000055511151231257827]`, `[0.1]`},
		{`{"a":"\u0000"}`, `{"a":""}`},
		{`{"a":"e\u0301"}`, `{"a":"\u00e9"}`},
		{`{"a":"\u00e9"}`, `{"a":"\u00c3\u00a9"}`},
	} {
		if fp(pair[0]) == fp(pair[1]) {
			t.Errorf("%s and %s share a fingerprint", pair[0], pair[1])
		}
	}
	for _, pair := range [][2]string{
		{`{"b":1,"a":2}`, `{"a":2, "b":1}`},
		{`{"a":"\u00e9"}`, `{"a":"é"}`},
		{`[1.0]`, `[1]`},
		{`[-0]`, `[0]`},
		{`[1e2]`, `[100]`},
	} {
		if fp(pair[0]) != fp(pair[1]) {
			t.Errorf("%s and %s: different fingerprints, documented as the same (RFC 8785)", pair[0], pair[1])
		}
	}
}

// TestAttackInformationalStatusesAreNotReplayable: replay_statuses accepted
// the 1xx class, which is never a final response (RFC 9110 section 15.2).
// The only 1xx net/http's transport returns is 101, whose body is another
// protocol's stream: it would be read as a body until the upstream closed
// it, then stored and replayed with a status no client takes as final.
func TestAttackInformationalStatusesAreNotReplayable(t *testing.T) {
	for _, s := range []string{"1xx", "101", "103"} {
		st, err := ParseStatus(s)
		if err != nil {
			t.Fatal(err)
		}
		r := testRoute("a", "/a")
		r.ReplayStatuses = []StatusRange{{Min: 200, Max: 299}, st}
		if _, err := New(DefaultRoute(), []Route{r}); err == nil || !strings.Contains(err.Error(), "routes[0].replay_statuses") {
			t.Errorf("replay_statuses [2xx, %s]: New returned %v, want a routes[0].replay_statuses error", s, err)
		}
	}
}
