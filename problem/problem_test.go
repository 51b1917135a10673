package problem_test

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/problem"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	d := problem.InProgress.With("retry later")
	d.RetryAfter = 3
	problem.Write(rec, d)
	if rec.Code != 409 || rec.Header().Get("Content-Type") != "application/problem+json" ||
		rec.Header().Get("Retry-After") != "3" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("got %d %v", rec.Code, rec.Header())
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["type"] != problem.Base+"request-in-progress" || got["status"] != 409.0 || got["detail"] != "retry later" || len(got) != 4 {
		t.Fatalf("body %v", got)
	}
	if rec.Header().Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
		t.Fatalf("Content-Length %s for %d bytes", rec.Header().Get("Content-Length"), rec.Body.Len())
	}
}

// TestPublisher: type URIs under the operator's base with the catalog's
// slug, and the describedby Link; the zero Publisher writes as Write.
func TestPublisher(t *testing.T) {
	pub := problem.Publisher{TypeBase: "https://api.example.com/problems/", DocsURL: "https://api.example.com/docs/idempotency"}
	rec := httptest.NewRecorder()
	pub.Write(rec, problem.KeyReused.With("x"))
	var d problem.Details
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Type != "https://api.example.com/problems/key-reused" || d.Status != 422 {
		t.Errorf("type %q status %d", d.Type, d.Status)
	}
	if l := rec.Header().Get("Link"); l != `<https://api.example.com/docs/idempotency>; rel="describedby"` {
		t.Errorf("Link = %q", l)
	}
	rec = httptest.NewRecorder()
	problem.Publisher{}.Write(rec, problem.KeyReused.With("x"))
	if !strings.Contains(rec.Body.String(), `"type":"`+problem.Base+`key-reused"`) || rec.Header().Get("Link") != "" {
		t.Errorf("zero Publisher: %v %s", rec.Header(), rec.Body)
	}
}
