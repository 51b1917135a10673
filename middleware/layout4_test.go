package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareLayout4: the middleware on store.valkey.layout 4 beside
// one on the default layout 3, on one Valkey and key prefix (a fleet
// mid-switch, docs/protocol.md "Rolling upgrade to layout 4"): a key
// claimed through either is replayed byte for byte by the other, refused
// (422) with another body, and the handler runs it once.
func TestMiddlewareLayout4(t *testing.T) {
	srv := valkeytest.Start(t)
	h := newOrders()
	cfg3 := testConfig(srv.Addr(), "mw-layout:")
	cfg4 := strings.Replace(cfg3, "    key_prefix:", "    layout: 4\n    key_prefix:", 1)
	g3, g4 := serve(t, cfg3, h), serve(t, cfg4, h)
	// One Host for both, as behind a load balancer: the host joins the
	// key scope in process.
	post := func(t *testing.T, url, key, body string) answer {
		t.Helper()
		a, err := postHost(t, http.DefaultClient, context.Background(), url, "orders.example", "alice", key, body)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for name, pair := range map[string][2]string{"4 then 3": {g4.URL, g3.URL}, "3 then 4": {g3.URL, g4.URL}, "4 then 4": {g4.URL, g4.URL}} {
		t.Run(name, func(t *testing.T) {
			key := "k-" + strings.ReplaceAll(name, " ", "-")
			first := post(t, pair[0], key, `{"n":1}`)
			again := post(t, pair[1], key, `{"n":1}`)
			if first.status != 201 || again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("first %d %s, retry through the other %d %s (replayed %q): want the first replayed",
					first.status, first.body, again.status, again.body, again.header.Get("Idempotent-Replayed"))
			}
			if other := post(t, pair[1], key, `{"n":2}`); other.status != 422 {
				t.Fatalf("key reused with another body: %d %s, want 422", other.status, other.body)
			}
			if n := h.runsOf(key); n != 1 {
				t.Fatalf("handler ran %s %d times, want once", key, n)
			}
		})
	}
}
