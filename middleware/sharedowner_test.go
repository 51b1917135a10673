package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestSharedStoreRefusesAnotherOwnerSourceInAScope: a host replaces its
// middleware on one SharedStore (its configuration reload), and the new
// configuration takes owners from header:X-Partner where the old one took
// them from header:X-User, in one scope. User 42's records are in the
// store under "h:42", which partner 42 also is: New refuses the new
// configuration, as the proxy's and Caddy's reloads do, and partner 42 is
// never answered user 42's response.
func TestSharedStoreRefusesAnotherOwnerSourceInAScope(t *testing.T) {
	vk := valkeytest.Start(t)
	yaml := testConfig(vk.Addr(), "shared-owner:")
	parse := func(y string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(y), nil, config.InProcess())
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	users := parse(yaml)
	shared, err := middleware.OpenShared(users, middleware.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })
	h := newOrders()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: users, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(idem(h))
	t.Cleanup(srv.Close)
	if first := mustPost(t, srv.URL, "42", "k-owner", `{"item":1}`); first.status != http.StatusCreated {
		t.Fatalf("user 42: %d %s", first.status, first.body)
	}
	partners := parse(strings.Replace(yaml, "header:X-User", "header:X-Partner", 1))
	next, err := middleware.New(ctx, middleware.Options{Config: partners, Shared: shared})
	if err != nil {
		if !strings.Contains(err.Error(), "header:X-Partner") {
			t.Fatalf("New refused the new configuration without naming its owner source: %v", err)
		}
		return // refused: the running middleware stays
	}
	srv2 := httptest.NewServer(next(h))
	t.Cleanup(srv2.Close)
	resp, body, err := gatetest.Post(context.Background(), nil, srv2.URL+"/v1/orders", strings.TrimPrefix(srv.URL, "http://"),
		http.Header{"X-Partner": {"42"}, "Idempotency-Key": {`"k-owner"`}}, `{"item":1}`)
	if err != nil {
		t.Fatal(err)
	}
	t.Fatalf("New built a middleware taking header:X-Partner in header:X-User's scope on one SharedStore; partner 42 got %d replayed=%q %s",
		resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
}
