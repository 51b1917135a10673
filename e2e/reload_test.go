package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestReloadKeepsFlagOverrides: idemgate started with --upstream and a
// config file without upstream.url reloads an edited file on SIGHUP with
// the same flag overrides it started with, instead of rejecting every
// reload for the missing upstream.url.
func TestReloadKeepsFlagOverrides(t *testing.T) {
	up := startUpstream(t)
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	// No upstream.url and no listen: --upstream and --listen supply them.
	file := func(required bool) string {
		return fmt.Sprintf(`admin:
  listen: %q
store:
  driver: memory
log:
  format: json
  level: info
defaults:
  owner: "header:X-User"
routes:
  - name: orders
    match: "POST /v1/orders"
    required: %v
`, adminListen, required)
	}
	if err := os.WriteFile(path, []byte(file(false)), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Gate{t: t, URL: "http://" + listen, AdminURL: "http://" + adminListen, config: path,
		args: []string{"serve", "--config", path, "--upstream", up.URL, "--listen", listen, "--wait-store", "10s"}, logs: &syncbuf.Buffer{}}
	g.Start()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("idemgate logs:\n%s", g.Logs())
		}
	})

	// Before the edit a keyless POST passes through.
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "", `{}`); a.Status != 201 {
		t.Fatalf("keyless POST before the edit: %v, want the upstream's 201", a)
	}
	const ok, failed = `idemgate_config_reloads_total{result="success"}`, `idemgate_config_reloads_total{result="failure"}`
	if s, f := metricValue(t, g, ok), metricValue(t, g, failed); s != 0 || f != 0 {
		t.Fatalf("reload counters before the edit: success %v failure %v, want 0 0", s, f)
	}

	// The edit makes the key required; SIGHUP (the file watcher may reload
	// on the write too, with the same result).
	if err := os.WriteFile(path, []byte(file(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	g.send(syscall.SIGHUP)
	var s, f float64
	eventually(t, 10*time.Second, "a reload attempt", func() bool {
		s, f = metricValue(t, g, ok), metricValue(t, g, failed)
		return s+f >= 1
	})
	if f != 0 || s < 1 {
		t.Fatalf("reloads: success %v failure %v, want only successes; the reload did not see --upstream", s, f)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "", `{}`); !a.isProblem(400, "missing-key") {
		t.Fatalf("keyless POST after the reload: %v, want 400 missing-key from the reloaded route", a)
	}
	if !strings.Contains(g.Logs(), "config reloaded") {
		t.Errorf("no \"config reloaded\" log line")
	}
	if n := up.Total(); n != 1 {
		t.Errorf("upstream saw %d requests, want 1 (the keyless POST before the edit)", n)
	}
}
