package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// TestCaddyPostgresKilledDuringCall: the Caddy module's shape of the
// middleware's TestPostgresKilledWhileTheHandlerRuns. PostgreSQL is
// killed (SIGKILL) while the upstream behind reverse_proxy acts and stays
// away for longer than the lease, so the response cannot be recorded when
// the upstream answers. Once PostgreSQL is back, the retry is replayed
// that response (or refused until it is recorded), never run again, on a
// reject configuration and on a takeover one alike.
func TestCaddyPostgresKilledDuringCall(t *testing.T) {
	for _, mode := range []string{"reject", "takeover"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // each on a server of its own; the outages take most of the time
			pg := pgtest.Start(t, pgtest.WithFsync())
			var execs atomic.Int64
			var once sync.Once
			up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, r *http.Request, n int64) {
				if r.Header.Get("Idempotency-Key") == "k-pg" {
					once.Do(pg.Kill) // the upstream acted; the store is gone when it answers
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"execution":%d}`, n)
			})
			yaml := fmt.Sprintf("\nstore:\n  driver: postgres\n  postgres:\n    dsn: %q", pg.DSN()) +
				strings.Replace(noStoreYAML, "lease: 5s", "lease: 1s", 1) + "  on_abandoned: " + mode + "\n"
			c := runCaddy(t, caddySite{YAML: yaml, After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")})
			if a := post(t, c.URL, "alice", "warm", `{}`); a.Status != http.StatusCreated {
				t.Fatalf("warm-up: %d %s", a.Status, a.Body)
			}
			first := post(t, c.URL, "alice", "k-pg", `{}`)
			t.Logf("first, its response not recorded: %d %s", first.Status, first.Body)
			time.Sleep(2500 * time.Millisecond) // the outage outlasts the lease
			pg.Start()
			var retry answer
			gatetest.Eventually(t, 30*time.Second, "a final answer once PostgreSQL is back", func() bool {
				retry = post(t, c.URL, "alice", "k-pg", `{}`)
				if strings.HasSuffix(problemType(retry), "outcome-unknown") {
					t.Fatalf("retry: %d %s; the response is held by Caddy, want it recorded and replayed", retry.Status, retry.Body)
				}
				return retry.Status != http.StatusServiceUnavailable && retry.Status != http.StatusConflict
			})
			if n := execs.Load(); n != 2 {
				t.Fatalf("upstream executed %d times for 2 operations (retry %d %s)", n, retry.Status, retry.Body)
			}
			if retry.Status != http.StatusCreated || !retry.replayed() {
				t.Fatalf("retry: %d %s; want the replay", retry.Status, retry.Body)
			}
		})
	}
}
