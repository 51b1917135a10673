package middleware_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/middleware"
)

// TestMiddlewareAccessLineOnlyWhenAsked: a service that gives the
// middleware a logger gets its warnings, not a line per request; the
// access line comes with Options.AccessLog, and log.access: false still
// turns it off. The answers are the same either way.
func TestMiddlewareAccessLineOnlyWhenAsked(t *testing.T) {
	const base = `store:
  driver: memory
defaults:
  owner: header:X-User
routes:
  - name: orders
    match: "POST /v1/orders"
`
	for _, c := range []struct {
		name      string
		yaml      string
		accessLog bool
		want      int
	}{
		{"default", base, false, 0},
		{"AccessLog", base, true, 2},
		{"AccessLog with log.access false", base + "log:\n  access: false\n", true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out syncbuf.Buffer
			idem := middlewaretest.EngineWith(t, c.yaml, middleware.Options{
				Logger: slog.New(slog.NewJSONHandler(&out, nil)), AccessLog: c.accessLog,
			})
			h := newOrders()
			srv := httptest.NewServer(idem(h))
			t.Cleanup(srv.Close)
			for range 2 {
				if a := mustPost(t, srv.URL, "alice", "k-1", `{"n":1}`); a.status != http.StatusCreated {
					t.Fatalf("status %d %s, want 201", a.status, a.body)
				}
			}
			if n := h.runsOf("k-1"); n != 1 {
				t.Fatalf("handler ran %d times, want once", n)
			}
			if n := strings.Count(out.String(), `"msg":"request"`); n != c.want {
				t.Fatalf("%d access lines, want %d:\n%s", n, c.want, out.String())
			}
		})
	}
}
