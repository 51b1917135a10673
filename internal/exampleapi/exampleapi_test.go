package exampleapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func do(t *testing.T, method, url, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestDeleteOrder: DELETE /v1/orders/{id} deletes a created order (200,
// then GET and a second DELETE are 404).
func TestDeleteOrder(t *testing.T) {
	api := New()
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	code, h, _ := do(t, "POST", srv.URL+"/v1/orders", `{"amount":5}`)
	if code != 201 || h.Get("Location") != "/v1/orders/ord_1" {
		t.Fatalf("create: %d %v", code, h)
	}
	if code, _, body := do(t, "DELETE", srv.URL+"/v1/orders/ord_1", ""); code != 200 || !strings.Contains(body, `"deleted":true`) {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _, _ := do(t, "GET", srv.URL+"/v1/orders/ord_1", ""); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
	if code, _, _ := do(t, "DELETE", srv.URL+"/v1/orders/ord_1", ""); code != 404 {
		t.Errorf("second delete: %d", code)
	}
	if api.Deletes() != 1 || api.Creates() != 1 {
		t.Errorf("deletes %d creates %d", api.Deletes(), api.Creates())
	}
}

// TestCatchAllPost: a POST to any other path executes (counted) and
// answers 2xx; other methods there are 404; ?status chooses the status.
func TestCatchAllPost(t *testing.T) {
	api := New()
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	for i, path := range []string{"/webhooks/stripe", "/v1/refunds", "/"} {
		code, _, body := do(t, "POST", srv.URL+path, `{"id":"evt_1"}`)
		var got struct {
			ID, Path string
			Request  map[string]any
		}
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Path != path || got.Request["id"] != "evt_1" || got.ID == "" {
			t.Errorf("POST %s: %d %s", path, code, body)
		}
		if api.Posts() != int64(i+1) {
			t.Errorf("posts = %d after %d", api.Posts(), i+1)
		}
	}
	if code, _, _ := do(t, "POST", srv.URL+"/v1/refunds?status=503", `{}`); code != 503 {
		t.Errorf("?status=503: %d", code)
	}
	if code, _, _ := do(t, "GET", srv.URL+"/v1/refunds", ""); code != 404 {
		t.Errorf("GET on the catch-all: %d, want 404", code)
	}
	if _, _, body := do(t, "GET", srv.URL+"/stats", ""); !strings.Contains(body, `"posts":4`) {
		t.Errorf("stats: %s", body)
	}
}

// TestEcho: /echo answers the request line, headers and body as JSON, for
// any method.
func TestEcho(t *testing.T) {
	srv := httptest.NewServer(New().Handler())
	t.Cleanup(srv.Close)
	code, h, body := do(t, "PUT", srv.URL+"/echo/a?b=1", "hello", "X-Real-IP", "203.0.113.9", "Content-Type", "text/plain")
	var e echoed
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal([]byte(body), &e) != nil {
		t.Fatalf("echo: %d %v %s", code, h, body)
	}
	if e.RequestLine != "PUT /echo/a?b=1 HTTP/1.1" || e.Method != "PUT" || e.Target != "/echo/a?b=1" || e.Body == nil || *e.Body != "hello" ||
		e.Headers["X-Real-Ip"][0] != "203.0.113.9" || e.Headers["Content-Type"][0] != "text/plain" || e.Host == "" {
		t.Errorf("echo = %+v", e)
	}
	_, _, body = do(t, "POST", srv.URL+"/echo", "\xff\xfe")
	if err := json.Unmarshal([]byte(body), &e); err != nil || string(e.BodyBase64) != "\xff\xfe" {
		t.Errorf("binary body: %s", body)
	}
}
