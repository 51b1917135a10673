package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// webhookRoutes is README's "Recipe: deduplicate provider webhooks".
const webhookRoutes = `  - name: github-webhooks
    match: "POST /webhooks/github"
    scope: github
    owner: none
    allow_global_keys: true
    required: true
    key: { from: header, name: X-GitHub-Delivery }
  - name: stripe-webhooks
    match: "POST /webhooks/stripe"
    scope: stripe
    owner: none
    allow_global_keys: true
    required: true
    key: { from: body, pointer: /id }
  - name: orders
    match: "POST /v1/orders"
    fingerprint: { body: json, exclude: ["/client_ts", "/meta/request_id"] }
`

// deliver posts one webhook delivery and reads the whole answer.
func deliver(t *testing.T, url string, header http.Header, body string) Answer {
	t.Helper()
	return answerOf(gatetest.Post(context.Background(), nil, url, "", header, body))
}

// TestWebhookDedupe runs the webhook recipe on the real binary over
// Valkey: the same delivery posted 5 times, 3 of them concurrently while
// the first is still running and 2 later, reaches the backend once, and
// the provider gets the original 2xx every time; for GitHub (the delivery
// id in a header) and Stripe (the event id in the body).
func TestWebhookDedupe(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	var handled atomic.Int64
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		n := handled.Add(1)
		time.Sleep(300 * time.Millisecond) // the handler is slow: concurrent redeliveries overlap it
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, `{"handled":%d,"bytes":%d}`, n, len(body))
	}, 0, nil)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, Routes: webhookRoutes})

	for _, c := range []struct {
		name, path, body string
		header           http.Header
	}{
		{"github", "/webhooks/github", `{"action":"opened","number":7}`, http.Header{"X-Github-Delivery": {"72d3162e-cc78-11e3-81ab-4c9367dc0958"}, "X-Github-Event": {"pull_request"}}},
		{"stripe", "/webhooks/stripe", `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"payment_intent.succeeded"}`, http.Header{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := handled.Load()
			answers := make([]Answer, 5)
			var wg sync.WaitGroup
			for i := range 3 {
				wg.Add(1)
				go func() { defer wg.Done(); answers[i] = deliver(t, g.URL+c.path, c.header, c.body) }()
			}
			wg.Wait()
			time.Sleep(200 * time.Millisecond)
			answers[3] = deliver(t, g.URL+c.path, c.header, c.body)
			time.Sleep(200 * time.Millisecond)
			answers[4] = deliver(t, g.URL+c.path, c.header, c.body)
			replays := 0
			for i, a := range answers {
				if a.Err != nil || a.Status != http.StatusAccepted || !bytes.Equal(a.Body, answers[0].Body) {
					t.Fatalf("delivery %d: %d %q %v, want 202 %q", i, a.Status, a.Body, a.Err, answers[0].Body)
				}
				if a.replayed() {
					replays++
				}
			}
			if replays != 4 {
				t.Errorf("%d of 5 answers are replays, want 4", replays)
			}
			if n := handled.Load() - before; n != 1 {
				t.Fatalf("the backend handled the delivery %d times, want once", n)
			}
		})
	}

	// A delivery without its id is refused, never forwarded unprotected.
	before := handled.Load()
	if a := deliver(t, g.URL+"/webhooks/stripe", http.Header{}, `{"type":"ping"}`); !a.isProblem(400, "missing-key") {
		t.Errorf("stripe delivery without id: %s", a)
	}
	if a := deliver(t, g.URL+"/webhooks/github", http.Header{}, `{}`); !a.isProblem(400, "missing-key") {
		t.Errorf("github delivery without id: %s", a)
	}
	if handled.Load() != before {
		t.Error("a delivery without an id reached the backend")
	}
}

// TestWebhookRoutesFingerprintExclusions: on the real binary, a retry whose excluded
// fields changed is replayed and a change elsewhere is 422.
func TestWebhookRoutesFingerprintExclusions(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: webhookRoutes})
	first := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{"amount":5,"client_ts":"10:00:00","meta":{"request_id":"r1"}}`)
	if first.Status != 201 {
		t.Fatalf("first: %s", first)
	}
	retry := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{"meta":{"request_id":"r2"},"amount":5,"client_ts":"10:00:07"}`)
	if retry.Status != 201 || !retry.replayed() || !bytes.Equal(retry.Body, first.Body) {
		t.Fatalf("retry with new client_ts and request_id: %s, want the replay", retry)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{"amount":6,"client_ts":"10:00:00","meta":{"request_id":"r1"}}`); !a.isProblem(422, "key-reused") {
		t.Fatalf("another amount: %s, want 422 key-reused", a)
	}
	if n := up.Calls("alice", "k1"); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}
