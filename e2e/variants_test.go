package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
)

// TestSecurityVariantsCannotEscapeEnforcedRoutes runs the observed escapes
// through the real binary, configured from YAML, in front of a counting
// upstream: with a required "POST /v1/orders", a required subtree
// "POST /v1/payments/", a required "PATCH /v1/orders/{id}" and a "/v1/"
// passthrough route, the forms an Express, Tomcat or Rails upstream
// executes as those operations ran without a key, or twice with one.
func TestSecurityVariantsCannotEscapeEnforcedRoutes(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: `  - name: orders
    match: "POST /v1/orders"
    required: true
  - name: payments
    match: "POST /v1/payments/"
    required: true
  - name: update-order
    match: "PATCH /v1/orders/{id}"
    methods: [PATCH]
    required: true
  - name: v1
    match: "/v1/"
    mode: passthrough
`})
	for _, path := range []string{"/v1/orders/", "/v1/Orders", "/v1/orders;jsessionid=1", "/v1/payments"} {
		if a := postTimeout(10*time.Second, g.URL+path, "alice", "", `{"amount":1}`); !a.isProblem(400, "missing-key") {
			t.Errorf("POST %s without a key: %v, want 400 missing-key", path, a)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests without a key, want none", n)
	}
	for i := 0; i < 2; i++ {
		a := postTimeout(10*time.Second, g.URL+"/v1/orders/", "alice", "k1", `{"amount":1}`)
		if a.Status != 201 || a.replayed() != (i == 1) {
			t.Errorf("POST /v1/orders/ with key k1, attempt %d: %v, want 201 (replayed the second time)", i+1, a)
		}
	}
	if n := up.Calls("alice", "k1"); n != 1 {
		t.Errorf("key k1 on /v1/orders/ executed %d times, want once", n)
	}

	send := func(target, contentType, body string) Answer {
		h := http.Header{"Content-Type": {contentType}, "X-User": {"alice"}}
		return answerOf(gatetest.Post(context.Background(), nil, g.URL+target, "", h, body))
	}
	before := up.Total()
	for _, c := range [][3]string{
		{"/v1/orders/7?_method=PATCH", "application/json", "{}"},
		{"/v1/orders/7", "application/x-www-form-urlencoded", "status=paid&_method=patch"},
	} {
		if a := send(c[0], c[1], c[2]); !a.isProblem(400, "ambiguous-request") {
			t.Errorf("POST %s with body %q: %v, want 400 ambiguous-request", c[0], c[2], a)
		}
	}
	if a := send("/v1/orders/7", "application/x-www-form-urlencoded", "status=paid"); a.Status != 201 || !strings.Contains(string(a.Body), `"request":"status=paid"`) {
		t.Errorf("form without _method: %v, want it passed through with its body", a)
	}
	if n := up.Total() - before; n != 1 {
		t.Errorf("the upstream executed %d of the _method requests, want only the one without _method", n)
	}
}

// TestSecurityVariantsSecondRound: the forms a second adversarial round found,
// through the real binary configured from YAML (required "POST /v1/orders"
// and "PATCH /v1/orders/{id}", a "/v1/" passthrough route), each sent raw
// so its bytes reach idemgate exactly as written: a format extension, a
// double-encoded slash, a trailing space or dot, an override field spelled
// with underscores, a form without Content-Type, a JSON _method member and
// PHP's spellings of _method. None reaches the counting upstream without a
// key.
func TestSecurityVariantsSecondRound(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: `  - name: orders
    match: "POST /v1/orders"
    required: true
  - name: update-order
    match: "PATCH /v1/orders/{id}"
    methods: [PATCH]
    required: true
  - name: v1
    match: "/v1/"
    mode: passthrough
`})
	send := func(head, body string) Answer {
		head = strings.Replace(head, " HTTP/1.1", " HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nConnection: close", 1)
		resp, b, err := rawExchange(g.addr(), head+"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body, 10*time.Second)
		if err != nil {
			return Answer{Err: err}
		}
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	for _, c := range []struct{ head, body, problem string }{
		{"POST /v1/orders.json HTTP/1.1", "{}", "missing-key"},
		{"POST /v1%252Forders HTTP/1.1", "{}", "missing-key"},
		{"POST /v1/orders%20 HTTP/1.1", "{}", "missing-key"},
		{"POST /v1/orders. HTTP/1.1", "{}", "missing-key"},
		{"POST /v1/orders/7 HTTP/1.1\r\nX-HTTP_Method_Override: PATCH", "{}", "ambiguous-request"},
		{"POST /v1/orders/7 HTTP/1.1", "status=paid&_method=PATCH", "ambiguous-request"},
		{"POST /v1/orders/7 HTTP/1.1\r\nContent-Type: application/json", `{"status":"paid","_method":"PATCH"}`, "ambiguous-request"},
		{"POST /v1/orders/7?.method=PATCH HTTP/1.1", "{}", "ambiguous-request"},
		{"POST /v1/orders/7?%20method=PATCH HTTP/1.1", "{}", "ambiguous-request"},
	} {
		if a := send(c.head, c.body); !a.isProblem(400, c.problem) {
			t.Errorf("%q with body %q: %v, want 400 %s", c.head, c.body, a, c.problem)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests without a key, want none", n)
	}
	if a := send("POST /v1/orders/7 HTTP/1.1\r\nContent-Type: application/json", `{"status":"paid"}`); a.Status != 201 || !strings.Contains(string(a.Body), `"request":"{\"status\":\"paid\"}"`) {
		t.Errorf("JSON without _method: %v, want it passed through with its body", a)
	}
}
