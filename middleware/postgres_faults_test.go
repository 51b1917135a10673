package middleware_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// pgConfig is testConfig on the PostgreSQL store of dsn.
func pgConfig(dsn string) string {
	return fmt.Sprintf(`store:
  driver: postgres
  postgres:
    dsn: %q
log:
  access: false
defaults:
  owner: header:X-User
  lease: 1s
  wait_timeout: 5s
routes:
  - name: orders
    match: "POST /v1/orders"
    max_response_bytes: 4KiB
`, dsn)
}

// TestPostgresKilledWhileTheHandlerRuns: the middleware on PostgreSQL,
// whose server is killed (SIGKILL) while the handler acts and stays away
// for longer than the lease. The response cannot be recorded when the
// handler answers; once PostgreSQL is back, the retry is replayed it (or
// refused until it is recorded), never run again, on a reject route and
// on a takeover route alike.
func TestPostgresKilledWhileTheHandlerRuns(t *testing.T) {
	for _, mode := range []string{"reject", "takeover"} {
		t.Run(mode, func(t *testing.T) {
			pg := pgtest.Start(t, pgtest.WithFsync())
			h := newOrders()
			var once sync.Once
			kill := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r)
				if strings.Contains(r.Header.Get("Idempotency-Key"), "k-pg") {
					once.Do(pg.Kill) // the handler acted; the store is gone when it answers
				}
			})
			gate := serve(t, pgConfig(pg.DSN())+"    on_abandoned: "+mode+"\n", kill)
			if a := mustPost(t, gate.URL, "alice", "warm", `{"item":0}`); a.status != http.StatusCreated {
				t.Fatalf("warm-up: %d %s", a.status, a.body)
			}
			first := mustPost(t, gate.URL, "alice", "k-pg", `{"item":1}`)
			t.Logf("first, its response not recorded: %d %s", first.status, first.body)
			time.Sleep(2500 * time.Millisecond) // the outage outlasts the lease
			pg.Start()
			var retry answer
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				retry = mustPost(t, gate.URL, "alice", "k-pg", `{"item":1}`)
				if retry.status != http.StatusServiceUnavailable && retry.status != http.StatusConflict {
					break
				}
				if strings.Contains(retry.body, "outcome-unknown") {
					t.Fatalf("retry: %d %s; the response is held by the instance, want it recorded and replayed", retry.status, retry.body)
				}
				if time.Now().After(deadline) {
					t.Fatalf("retry still %d %s 30s after the store came back", retry.status, retry.body)
				}
			}
			if n := h.runsOf("k-pg"); n != 1 {
				t.Fatalf("handler ran %d times, want 1 (retry %d %s)", n, retry.status, retry.body)
			}
			if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry: %d replayed=%q %s; want the replay", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
			}
		})
	}
}
