package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestDemoExampleAPIServesTrials: idemgate demo's bundled API serves what
// README's trials need besides the quickstart: a keyed POST to any path
// executes once and replays, DELETE /v1/orders/{id} deletes, and /echo
// shows what the upstream receives.
func TestDemoExampleAPIServesTrials(t *testing.T) {
	api := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	g := startGateFlags(t, "demo", "--upstream", "http://"+api)

	first := postAsBearer(10*time.Second, g.URL+"/webhooks/stripe", "alice", "evt-1", `{"id":"evt_1"}`)
	retry := postAsBearer(10*time.Second, g.URL+"/webhooks/stripe", "alice", "evt-1", `{"id":"evt_1"}`)
	if first.Status != http.StatusOK || retry.Status != http.StatusOK || !retry.replayed() || string(retry.Body) != string(first.Body) {
		t.Fatalf("keyed POST to a catch-all path: first %v, retry %v; want 200 and its replay", first, retry)
	}
	resp, err := http.Get("http://" + api + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	stats, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(stats), `"posts":1`) {
		t.Errorf("example API stats %s; want one POST executed", stats)
	}

	created := postAsBearer(10*time.Second, g.URL+"/v1/orders", "alice", "ord-1", `{"amount":5}`)
	loc := created.Header.Get("Location")
	if created.Status != http.StatusCreated || loc == "" {
		t.Fatalf("create: %v", created)
	}
	req, _ := http.NewRequest(http.MethodDelete, g.URL+loc, nil)
	req.Header.Set("Authorization", "Bearer alice")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"deleted":true`) {
		t.Fatalf("DELETE %s through idemgate: %d %s", loc, resp.StatusCode, body)
	}

	req, _ = http.NewRequest(http.MethodPost, g.URL+"/echo?x=1", strings.NewReader(`{"a":1}`))
	req.Header.Set("X-Trial", "yes")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		RequestLine string              `json:"request_line"`
		Headers     map[string][]string `json:"headers"`
		Body        string              `json:"body"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &e) != nil || e.RequestLine != "POST /echo?x=1 HTTP/1.1" ||
		e.Body != `{"a":1}` || len(e.Headers["X-Trial"]) != 1 || len(e.Headers["X-Forwarded-For"]) != 1 {
		t.Fatalf("/echo through idemgate: %d %s", resp.StatusCode, body)
	}
}
