package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
)

// needValkey returns the paths of valkey-server and valkey-cli, failing the
// test with install instructions when they are missing.
func needValkey(t *testing.T) (server, cli string) {
	t.Helper()
	server, err1 := exec.LookPath("valkey-server")
	cli, err2 := exec.LookPath("valkey-cli")
	if err1 != nil || err2 != nil {
		needs.Missing(t, "valkey-server and valkey-cli", "valkey-server and valkey-cli are required (Valkey >= 7.2, the compose image is 8): "+
			"run `bash scripts/install-valkey.sh` or `apt-get install valkey-server` (Debian 12: from bookworm-backports)")
	}
	return server, cli
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		// The kernel may hand a just-closed port out again; two listeners
		// of one test given the same port made a config whose admin and
		// proxy addresses collided.
		if _, taken := issuedPorts.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatal("free port: every port the kernel offered was already handed out")
	return 0
}

// issuedPorts are the ports freePort returned in this test process.
var issuedPorts sync.Map

// waitListening polls addr until it accepts a connection or the deadline
// passes; it returns the last dial error.
func waitListening(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		var c net.Conn
		c, err = net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			return c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening after %v: %w", addr, within, err)
}

// composeValkey is a valkey-server started with the compose command.
type composeValkey struct {
	service  map[string]any // the compose service
	cli      string         // path of valkey-cli
	port     int            // loopback port it listens on
	password string         // its --requirepass (= REDISCLI_AUTH)
	dir      string         // its data directory
	args     []string       // the arguments it runs with
}

// startComposeValkey runs the compose file's valkey command on a free
// loopback port in a temporary directory, stopped in t.Cleanup.
func startComposeValkey(t *testing.T) composeValkey {
	t.Helper()
	server, cli := needValkey(t)
	vk := loadCompose(t)["valkey"]
	cmd := strs(t, "valkey command", vk["command"])
	if len(cmd) == 0 || cmd[0] != "valkey-server" {
		t.Fatalf("compose valkey: command %q does not start valkey-server", cmd)
	}
	env := composeEnv(t, "valkey", vk)
	password := env["REDISCLI_AUTH"]
	if password == "" {
		t.Fatal("compose valkey: REDISCLI_AUTH not set; the healthcheck could not authenticate")
	}
	args := make([]string, 0, len(cmd)+10)
	for _, a := range cmd[1:] {
		args = append(args, interpolate(a, nil))
	}
	if got := flagValue(args, "--requirepass"); got != password {
		t.Fatalf("compose valkey: --requirepass %q differs from REDISCLI_AUTH %q", got, password)
	}

	dir := t.TempDir()
	port := freePort(t)
	// Later arguments override the compose ones: loopback only, a private
	// data directory, no daemonizing so Cleanup can stop it.
	args = append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--logfile", filepath.Join(dir, "valkey.log"))
	done := runValkey(t, server, args, nil)
	if err := waitListening(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "valkey.log"))
		select {
		case werr := <-done:
			t.Fatalf("valkey-server rejected the compose flags %q: %v\n%s", args, werr, log)
		default:
		}
		t.Fatalf("%v\n%s", err, log)
	}
	return composeValkey{service: vk, cli: cli, port: port, password: password, dir: dir, args: args}
}

// TestComposeValkeyCommand runs the compose file's valkey command and
// healthcheck against a real valkey-server: the flags must be accepted, AOF
// must be on and written, the password must be enforced, and the
// healthcheck must fail when authentication fails (valkey-cli exits 0 on a
// NOAUTH reply, so a bare `valkey-cli ping` would always look healthy).
func TestComposeValkeyCommand(t *testing.T) {
	v := startComposeValkey(t)
	vk, cli, port, password, dir, args := v.service, v.cli, v.port, v.password, v.dir, v.args

	valkeyCLI := func(auth string, extra ...string) (string, error) {
		c := exec.Command(cli, append([]string{"-p", strconv.Itoa(port)}, extra...)...)
		c.Env = append(os.Environ(), "REDISCLI_AUTH="+auth)
		out, err := c.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}

	// The healthcheck, run the way Docker runs it: CMD-SHELL goes to sh -c.
	test := healthTest(t, "valkey", vk)
	if len(test) != 2 || test[0] != "CMD-SHELL" {
		t.Fatalf("compose valkey: healthcheck %q, want [CMD-SHELL, \"valkey-cli ... | grep ...\"]", test)
	}
	script := strings.ReplaceAll(test[1], "valkey-cli", cli+" -p "+strconv.Itoa(port))
	health := func(auth string) error {
		c := exec.Command("sh", "-c", script)
		c.Env = append(os.Environ(), "REDISCLI_AUTH="+auth)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			return fmt.Errorf("%w: %s", err, out.String())
		}
		return nil
	}
	if err := health(password); err != nil {
		t.Errorf("compose valkey healthcheck fails against a healthy server: %v", err)
	}
	if err := health("wrong-password"); err == nil {
		t.Error("compose valkey healthcheck passes with a wrong password; it must match PONG")
	}
	if out, _ := valkeyCLI("", "ping"); !strings.Contains(out, "NOAUTH") {
		t.Errorf("valkey without a password answered %q; --requirepass is not enforced", out)
	}

	// The running configuration is what the compose file asked for.
	for _, key := range []string{"appendonly", "appendfsync", "maxmemory-policy"} {
		want := flagValue(args, "--"+key)
		if want == "" {
			continue
		}
		out, err := valkeyCLI(password, "--no-auth-warning", "config", "get", key)
		if err != nil {
			t.Fatalf("config get %s: %v: %s", key, err, out)
		}
		if lines := strings.Split(out, "\n"); len(lines) != 2 || strings.TrimSpace(lines[1]) != want {
			t.Errorf("valkey %s = %q, compose asks for %q", key, out, want)
		}
	}

	// An acknowledged write is in the append-only file (with fsync always
	// it is on disk before the reply).
	const probe = "idemgate:deploy-test-claim"
	if out, err := valkeyCLI(password, "--no-auth-warning", "set", probe, "1"); err != nil || out != "OK" {
		t.Fatalf("set: %v: %s", err, out)
	}
	var aof []byte
	files, _ := filepath.Glob(filepath.Join(dir, "appendonlydir", "*.incr.aof"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		aof = append(aof, b...)
	}
	if !bytes.Contains(aof, []byte(probe)) {
		t.Errorf("the acknowledged SET is not in the AOF files %v; persistence is off", files)
	}
}

// runValkey starts server (valkey-server) with args in the foreground, its
// output to out (discarded when nil), and stops it with SIGTERM in
// t.Cleanup, failing the test when it has not exited 10 s later. The
// channel gets the process's exit once it ends.
func runValkey(t *testing.T, server string, args []string, out io.Writer) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, server, args...)
	srv.Stdout, srv.Stderr = out, out
	srv.Cancel = func() error { return srv.Process.Signal(syscall.SIGTERM) }
	srv.WaitDelay = 5 * time.Second
	if err := srv.Start(); err != nil {
		cancel()
		t.Fatalf("start valkey-server %q: %v", args, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("valkey-server pid %d did not exit", srv.Process.Pid)
		}
	})
	return done
}
