package middleware_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareLayout4: the middleware on store.valkey.layout 4 beside
// one on the default layout 3, on one Valkey and key prefix (a fleet
// mid-switch, docs/protocol.md "Rolling upgrade to layout 4"): a key
// claimed through either is replayed byte for byte by the other, refused
// (422) with another body, and the handler runs it once.
func TestMiddlewareLayout4(t *testing.T) { testMiddlewareLayouts(t, 3, 4) }

// TestMiddlewareLayout5: the same with the middleware on layout 5 beside
// one on layout 4 (docs/protocol.md, "Rolling upgrade to layout 5").
func TestMiddlewareLayout5(t *testing.T) { testMiddlewareLayouts(t, 4, 5) }

// testMiddlewareLayouts runs two middlewares writing layouts from and to
// on one Valkey and key prefix, each key through one then the other.
func testMiddlewareLayouts(t *testing.T, from, to int) {
	srv := valkeytest.Start(t)
	h := newOrders()
	withLayout := func(l int) string {
		return strings.Replace(testConfig(srv.Addr(), "mw-layout:"), "    key_prefix:", "    layout: "+strconv.Itoa(l)+"\n    key_prefix:", 1)
	}
	g3, g4 := serve(t, withLayout(from), h), serve(t, withLayout(to), h)
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
	a, b := strconv.Itoa(to), strconv.Itoa(from)
	for name, pair := range map[string][2]string{a + " then " + b: {g4.URL, g3.URL}, b + " then " + a: {g3.URL, g4.URL}, a + " then " + a: {g4.URL, g4.URL}} {
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
