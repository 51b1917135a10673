package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// getAdmin GETs path on the gate's admin listener and returns status and body.
func getAdmin(t *testing.T, g *Gate, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(g.AdminURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStartWithoutStore: idemgate starts while its Valkey is not there yet.
// It listens at once, is healthy but not ready (naming the store), refuses
// keyed requests with 503 store-unavailable, proxies requests it does not
// enforce, and becomes ready by itself, with no restart, once Valkey starts.
func TestStartWithoutStore(t *testing.T) {
	port := valkeytest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	up := startUpstream(t)
	g := startGateArgs(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{addr},
		Routes: ordersRoute() + "  - name: uploads\n    match: \"/v1/uploads/\"\n    mode: passthrough\n"}, nil)

	if code, _ := getAdmin(t, g, "/healthz"); code != 200 {
		t.Fatalf("/healthz without the store = %d, want 200", code)
	}
	if code, body := getAdmin(t, g, "/readyz"); code != 503 || !strings.Contains(body, "valkey store is not connected yet") {
		t.Fatalf("/readyz without the store = %d %s, want 503 naming the valkey store", code, body)
	}
	if a := postTimeout(10*time.Second, g.URL+"/v1/orders", "alice", "k1", "{}"); !a.isProblem(503, "store-unavailable") {
		t.Fatalf("keyed request without the store: %v, want 503 store-unavailable", a)
	}
	if a := mustPost(t, g.URL+"/v1/uploads/x", "alice", "u1", "data"); a.Status != 201 {
		t.Fatalf("passthrough request without the store: %v, want 201 from the upstream", a)
	}
	if v := metricValue(t, g, "idemgate_store_up"); v != 0 {
		t.Fatalf("idemgate_store_up without the store = %v, want 0", v)
	}
	if up.Calls("alice", "k1") != 0 {
		t.Fatal("a keyed request reached the upstream without the store")
	}

	valkeytest.Start(t, valkeytest.WithPort(port))
	eventually(t, 30*time.Second, "/readyz 200 once Valkey is up", func() bool {
		code, _ := getAdmin(t, g, "/readyz")
		return code == 200
	})
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", "{}"); a.Status != 201 || a.replayed() {
		t.Fatalf("keyed request once Valkey is up: %v, want 201 original", a)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", "{}"); !a.replayed() {
		t.Fatalf("retry: %v, want a replay", a)
	}
	eventually(t, 5*time.Second, "idemgate_store_up 1", func() bool { return metricValue(t, g, "idemgate_store_up") == 1 })
	if n := strings.Count(g.Logs(), `"msg":"store connected"`); n != 1 {
		t.Fatalf(`"store connected" logged %d times, want once`, n)
	}
	if n := strings.Count(g.Logs(), `"msg":"store not reachable yet`); n != 1 {
		t.Fatalf(`"store not reachable yet" logged %d times, want once`, n)
	}
}

// TestWaitStoreExitsWhenUnreachable: with --wait-store the old behaviour
// stays: no listener until the store answers, exit 1 when it does not.
func TestWaitStoreExitsWhenUnreachable(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	up := startUpstream(t)
	cfg := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{addr}}
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(path, []byte(cfg.yaml(listen, adminListen)), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--config", path, "--wait-store", "1s")
	cmd.Stdout, cmd.Stderr = logs, logs
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("idemgate --wait-store 1s with Valkey down: %v, want exit status 1; logs:\n%s", err, logs.String())
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("took %v to give up after --wait-store 1s", took)
	}
	if !strings.Contains(logs.String(), "unreachable after --wait-store 1s") {
		t.Fatalf("logs do not say why:\n%s", logs.String())
	}
}
