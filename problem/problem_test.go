package problem_test

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
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
