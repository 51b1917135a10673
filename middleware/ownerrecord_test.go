package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// partnerConfig is yaml with its owners taken from header:X-Partner
// instead of header:X-User, in the same scope.
func partnerConfig(t *testing.T, yaml string) string {
	t.Helper()
	if !strings.Contains(yaml, "owner: header:X-User") {
		t.Fatal("the configuration takes no owners from header:X-User")
	}
	return strings.Replace(yaml, "owner: header:X-User", "owner: header:X-Partner", 1)
}

// postPartner sends the order POST with key k as partner v, with the Host
// field host: instances behind one load balancer see one Host.
func postPartner(t *testing.T, url, host, v, k string) answer {
	t.Helper()
	resp, b, err := gatetest.Post(context.Background(), nil, url+"/v1/orders", host,
		http.Header{"X-Partner": {v}, "Idempotency-Key": {`"` + k + `"`}}, `{"item":1}`)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// isOwnerConflict reports whether a is the 500 owner-source-conflict
// problem.
func isOwnerConflict(a answer) bool {
	return a.status == http.StatusInternalServerError && strings.Contains(a.body, "owner-source-conflict") &&
		a.header.Get("Idempotent-Replayed") == ""
}

// TestOwnerRecordRefusesAnotherSourceBesideOnOneStore: two middlewares
// (two services, or two pods of one) built with New, not on one
// SharedStore, on one Valkey or PostgreSQL, one taking owners from
// header:X-User, the other from header:X-Partner, in one scope: the owner
// record the first wrote refuses the second the scope, so partner 42 is
// never answered user 42's response and the handler runs once.
func TestOwnerRecordRefusesAnotherSourceBesideOnOneStore(t *testing.T) {
	for _, driver := range []string{"valkey", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			var yaml string
			if driver == "valkey" {
				yaml = testConfig(valkeytest.Start(t).Addr(), "owner-record:")
			} else {
				yaml = pgConfig(pgtest.Start(t).DSN())
			}
			h := newOrders()
			users := serve(t, yaml, h)
			partners := serve(t, partnerConfig(t, yaml), h)
			if a := mustPost(t, users.URL, "42", "k", `{"item":1}`); a.status != http.StatusCreated {
				t.Fatalf("user 42: %d %s", a.status, a.body)
			}
			host := strings.TrimPrefix(users.URL, "http://")
			if a := postPartner(t, partners.URL, host, "42", "k"); !isOwnerConflict(a) {
				t.Fatalf("partner 42 on the second middleware: %d replayed=%q %s, want 500 owner-source-conflict",
					a.status, a.header.Get("Idempotent-Replayed"), a.body)
			}
			if n := h.runsOf("k"); n != 1 {
				t.Fatalf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// TestOwnerRecordRefusesAnotherSourceAfterARestart: a service restarted
// with its middleware's owners moved from header:X-User to
// header:X-Partner in one scope, on Valkey and on a bolt file, is refused
// the scope; restarted with header:X-User again, it replays.
func TestOwnerRecordRefusesAnotherSourceAfterARestart(t *testing.T) {
	for _, driver := range []string{"valkey", "bolt"} {
		t.Run(driver, func(t *testing.T) {
			var yaml string
			if driver == "valkey" {
				yaml = testConfig(valkeytest.Start(t).Addr(), "owner-restart:")
			} else {
				yaml = fmt.Sprintf(`store: {driver: bolt, bolt: {path: %q}}
log:
  access: false
defaults:
  owner: header:X-User
  lease: 3s
routes:
  - name: orders
    match: "POST /v1/orders"
`, filepath.Join(t.TempDir(), "idemgate.db"))
			}
			h := newOrders()
			// start serves yaml until the returned stop, which waits for
			// the store to close (a bolt file is then unlocked).
			start := func(yaml string) (string, func()) {
				cfg := parseInProcess(t, yaml)
				ctx, cancel := context.WithCancel(context.Background())
				idem, err := middleware.New(ctx, middleware.Options{Config: cfg, WaitStore: 10 * time.Second})
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				srv := httptest.NewServer(idem(h))
				var stopped bool
				stop := func() {
					if !stopped {
						stopped = true
						srv.Close()
						cancel()
					}
				}
				t.Cleanup(stop)
				return srv.URL, stop
			}
			url, stop := start(yaml)
			first := mustPost(t, url, "42", "k", `{"item":1}`)
			if first.status != http.StatusCreated {
				t.Fatalf("user 42: %d %s", first.status, first.body)
			}
			host := strings.TrimPrefix(url, "http://")
			stop()

			var a answer
			url, stop = start(partnerConfig(t, yaml))
			// A bolt file is unlocked a moment after its engine's context
			// ends; until the new engine opens it, it refuses with 503.
			gatetest.Until(10*time.Second, func() bool {
				a = postPartner(t, url, host, "42", "k")
				return a.status != http.StatusServiceUnavailable
			})
			if !isOwnerConflict(a) {
				t.Fatalf("partner 42 after the restart: %d replayed=%q %s, want 500 owner-source-conflict",
					a.status, a.header.Get("Idempotent-Replayed"), a.body)
			}
			stop()

			url, _ = start(yaml)
			var b answer
			gatetest.Until(10*time.Second, func() bool {
				b, _ = postHost(t, http.DefaultClient, context.Background(), url, host, "42", "k", `{"item":1}`)
				return b.status != http.StatusServiceUnavailable
			})
			if b.header.Get("Idempotent-Replayed") != "true" || b.body != first.body {
				t.Fatalf("user 42's retry after a restart with header:X-User: %d replayed=%q %s, want the replay of %s",
					b.status, b.header.Get("Idempotent-Replayed"), b.body, first.body)
			}
			if n := h.runsOf("k"); n != 1 {
				t.Fatalf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// parseInProcess parses yaml for in-process use.
func parseInProcess(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
