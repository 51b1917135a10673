package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestStrippedPrefixesNeverShareAnswers: a service mounts two handlers,
// each under http.StripPrefix ("/a", "/b") and its own middleware, on one
// configuration and one Valkey. Both handlers see the path /v1/orders;
// the client sent /a/v1/orders and /b/v1/orders, two endpoints. The same
// user's key and body sent to both must never answer /b with /a's stored
// response (the fingerprint covers the path as the client sent it, so it
// is 422 key-reused, as for any two endpoints), and /a's handler runs once.
func TestStrippedPrefixesNeverShareAnswers(t *testing.T) {
	vk := valkeytest.Start(t)
	cfg := testConfig(vk.Addr(), "strip:")
	handlers := map[string]*orders{"a": newOrders(), "b": newOrders()}
	mux := http.NewServeMux()
	for name, h := range handlers {
		mux.Handle("/"+name+"/", http.StripPrefix("/"+name, engine(t, cfg)(h)))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	send := func(name string) answer {
		t.Helper()
		resp, b, err := gatetest.Post(context.Background(), nil, srv.URL+"/"+name+"/v1/orders", "",
			http.Header{"X-User": {"alice"}, "Idempotency-Key": {`"k-strip"`}}, `{"item":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	if a := send("a"); a.status != http.StatusCreated {
		t.Fatalf("POST /a/v1/orders: %d %s", a.status, a.body)
	}
	b := send("b")
	if b.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("POST /b/v1/orders was answered /a/v1/orders's stored response: %d %s", b.status, b.body)
	}
	if b.status != http.StatusUnprocessableEntity {
		t.Fatalf("POST /b/v1/orders with /a's key: %d %s, want 422 key-reused", b.status, b.body)
	}
	if n := handlers["a"].runsOf("k-strip"); n != 1 {
		t.Fatalf("/a's handler ran %d times, want 1", n)
	}
}
