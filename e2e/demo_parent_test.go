package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestDemoExitsWithItsParent: the demo started by another process (a
// shell here, the go command under `go run ./cmd/idemgate demo`) stops
// when that process is killed by its PID, and frees its ports, instead of
// serving on as an orphan.
func TestDemoExitsWithItsParent(t *testing.T) {
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	admin := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	api := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	parent := exec.Command("sh", "-c", `"$0" demo --listen "$1" --admin-listen "$2" --upstream "http://$3" 2>/dev/null & echo $!; wait`, binary, listen, admin, api)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the demo's PID: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the demo's PID: %q", line)
	}
	// The demo is this test's grandchild: stopped here if it outlives the
	// shell.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !gatetest.Until(30*time.Second, gatetest.Serves("http://"+admin+"/healthz", 0)) {
		t.Fatal("the demo did not answer /healthz within 30s")
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	killed := time.Now()
	for _, addr := range []string{listen, admin, api} {
		for {
			l, err := net.Listen("tcp", addr)
			if err == nil {
				l.Close()
				break
			}
			if time.Since(killed) > 15*time.Second {
				t.Fatalf("%s still taken 15s after the demo's parent was killed: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("ports free %v after the parent was killed", time.Since(killed))
}
