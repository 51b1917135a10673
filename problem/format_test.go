package problem_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"text/template"

	"github.com/idemgate/idemgate/problem"
)

// stripeFormat is docs/problems-stripe.tmpl, the shipped example, as
// docs/problems.md configures it.
func stripeFormat(t *testing.T) *problem.Format {
	t.Helper()
	text, err := os.ReadFile("../docs/problems-stripe.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := problem.ParseTemplate("problems-stripe.tmpl", string(text))
	if err != nil {
		t.Fatal(err)
	}
	f, err := problem.NewFormat(tmpl, "application/json", map[string]map[string]string{
		"key-reused": {"stripe-should-retry": "false"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestStripeTemplate: the example template renders each final kind in
// Stripe's envelope, typed as Stripe types it, with the detail escaped;
// the kinds whose advice is "retry with the same key" stay RFC 9457 so a
// Stripe client retries them; the kind's headers and the content type
// are sent, and the type URI is under the publisher's base.
func TestStripeTemplate(t *testing.T) {
	f := stripeFormat(t)
	pub := problem.Publisher{TypeBase: "https://api.example.com/errors#"}
	for _, c := range []struct {
		kind     problem.Kind
		envelope string // Stripe error type; "" for the RFC 9457 fallback
	}{
		{problem.KeyReused, "idempotency_error"},
		{problem.MissingKey, "invalid_request_error"},
		{problem.OutcomeUnknown, "api_error"},
		{problem.InProgress, ""},
		{problem.StoreUnavailable, ""},
	} {
		rec := httptest.NewRecorder()
		detail := "the key \"k\" was used\nfor <another> request"
		if err := pub.WriteFormat(rec, c.kind.With(detail), f); err != nil {
			t.Fatalf("%s: %v", c.kind.Slug, err)
		}
		if rec.Code != c.kind.Status || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q", c.kind.Slug, rec.Code, rec.Header().Get("Content-Type"))
		}
		var body struct {
			Error *struct {
				Type, Code, Message string
				DocURL              string `json:"doc_url"`
			}
			Type, Detail string
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v in %s", c.kind.Slug, err, rec.Body)
		}
		if c.envelope == "" {
			if body.Error != nil || body.Type != "https://api.example.com/errors#"+c.kind.Slug || body.Detail != detail {
				t.Errorf("%s: %s, want RFC 9457", c.kind.Slug, rec.Body)
			}
			continue
		}
		if e := body.Error; e == nil || e.Type != c.envelope || e.Code != c.kind.Slug || e.Message != detail || e.DocURL != "https://api.example.com/errors#"+c.kind.Slug {
			t.Errorf("%s: %s, want a %s envelope", c.kind.Slug, rec.Body, c.envelope)
		}
		want := ""
		if c.kind == problem.KeyReused {
			want = "false"
		}
		if got := rec.Header().Get("Stripe-Should-Retry"); got != want {
			t.Errorf("%s: Stripe-Should-Retry %q, want %q", c.kind.Slug, got, want)
		}
	}
}

// TestNewFormatRefuses: what NewFormat can check before a request comes
// is refused, each at its key: a template that writes values without json
// (invalid JSON for a detail with quotes), one that fails to execute, an
// unknown kind, an admin listener kind (it always answers RFC 9457), a
// header idemgate sets itself, and a content type that is no media type.
func TestNewFormatRefuses(t *testing.T) {
	for _, c := range []struct {
		tmpl    string
		ct      string
		headers map[string]map[string]string
		want    string
	}{
		{tmpl: `{"message":"{{.Detail}}"}`, want: "template: writes invalid JSON"},
		{tmpl: `{{template "nope"}}`, want: "template: does not execute"},
		{headers: map[string]map[string]string{"key-reuse": {"X": "y"}}, want: "headers.key-reuse: is not a problem kind"},
		{headers: map[string]map[string]string{"admin-unauthorized": {"X": "y"}}, want: "headers.admin-unauthorized: is not a problem kind"},
		{headers: map[string]map[string]string{"key-reused": {"content-type": "text/plain"}}, want: "headers.key-reused.content-type: is set by idemgate"},
		{headers: map[string]map[string]string{"key-reused": {"bad name": "x"}}, want: "not a valid header field name"},
		{ct: "json", want: "content_type:"},
	} {
		tmpl := parseOrNil(t, c.tmpl)
		_, err := problem.NewFormat(tmpl, c.ct, c.headers)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewFormat(%q, %q, %v) = %v, want %q", c.tmpl, c.ct, c.headers, err, c.want)
		}
	}
	// A text template under a text content type need not write JSON.
	tmpl := parseOrNil(t, "{{.Status}} {{.Detail}}\n")
	if _, err := problem.NewFormat(tmpl, "text/plain; charset=utf-8", nil); err != nil {
		t.Errorf("text/plain template: %v", err)
	}
}

// parseOrNil parses text as a problems.template; "" is no template.
func parseOrNil(t *testing.T, text string) *template.Template {
	t.Helper()
	if text == "" {
		return nil
	}
	tm, err := problem.ParseTemplate("t", text)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestFormatRequestIDCannotBreakTheJSON: the request id is the client's
// X-Request-Id when it is a short token of visible ASCII, so it may hold
// quotes and backslashes. A JSON template that writes it unescaped must be
// refused at load, as one writing the detail unescaped is; otherwise a
// client's id `x"}` made every problem body invalid JSON, and a client
// library that cannot parse the error envelope takes it for a network
// failure.
func TestFormatRequestIDCannotBreakTheJSON(t *testing.T) {
	tmpl := parseOrNil(t, `{"message":{{json .Detail}},"request_id":"{{index .Extensions "request_id"}}"}`)
	f, err := problem.NewFormat(tmpl, "application/json", nil)
	if err != nil {
		if !strings.Contains(err.Error(), "template: writes invalid JSON") {
			t.Fatalf("NewFormat: %v; want the invalid-JSON refusal", err)
		}
		return
	}
	for _, k := range problem.Catalog() {
		if k.Outcome == "" {
			continue
		}
		d := k.With("detail")
		d.RequestID = `x"}` + "\\"
		w := httptest.NewRecorder()
		if err := (problem.Publisher{}).WriteFormat(w, d, f); err != nil {
			t.Fatalf("WriteFormat: %v", err)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("template accepted at load writes invalid JSON for request id %q: %s", d.RequestID, w.Body.Bytes())
		}
	}
}
