package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestE2EShutdownTimeoutShorterThanUpstreamIsRefused: the real binary
// refuses to start with a server.shutdown_timeout that a call in flight at
// SIGTERM could outlast, and the error names both keys.
func TestE2EShutdownTimeoutShorterThanUpstreamIsRefused(t *testing.T) {
	up := startUpstream(t)
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	doc := shortWait(gateConfig{Upstream: up.URL, UpTimeout: "3s"}.yaml(listen, adminListen)) + "server:\n  shutdown_timeout: 1s\n"
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "serve", "--config", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("idemgate started (and was killed after 10 s) with shutdown_timeout 1s < upstream.timeout 3s:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d (%v), want 1:\n%s", code, err, out.String())
	}
	for _, want := range []string{"server.shutdown_timeout", "upstream.timeout"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the error does not name %s:\n%s", want, out.String())
		}
	}
}
