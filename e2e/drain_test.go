package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestShutdownDrainsSlowCall: SIGTERM while a keyed request's upstream
// call (2 s) is in flight, with upstream.timeout 4 s and server.shutdown_timeout
// left at its default. The listener stops accepting and /readyz reports not
// ready during the drain; the client gets the upstream's 201, the process
// exits 0 only after that, and the response is recorded, so a retry through
// a second instance replays it without a second upstream call.
//
// Before the default followed upstream.timeout, a shutdown_timeout shorter
// than the call (e.g. IDEMGATE_SERVER_SHUTDOWN_TIMEOUT=1s, which idemgate
// now refuses) cut the call: the client got a connection error, the process
// exited 1 and the retry ran the operation again once the lease ended.
func TestShutdownDrainsSlowCall(t *testing.T) {
	const call = 2 * time.Second
	v := valkeytest.Start(t)
	up := startUpstream(t)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, UpTimeout: "4s"}
	a, b := startGateWith(t, c, shortWait), startGateWith(t, c, shortWait)
	entered := make(chan struct{}, 2)
	up.Set(nil, call, entered)

	done := make(chan Answer, 1)
	answeredAt := make(chan time.Time, 1)
	go func() {
		ans := postTimeout(30*time.Second, a.URL+"/v1/orders", "alice", "drain-1", `{"n":1}`)
		answeredAt <- time.Now()
		done <- ans
	}()
	waitEntered(t, entered, 10*time.Second)
	a.send(syscall.SIGTERM)

	// While the call runs: not ready, and no new connections.
	notReady := false
	listenerClosed := false
	for !(notReady && listenerClosed) && len(done) == 0 {
		if r := adminDo(t, "GET", a.AdminURL+"/readyz", ""); r.isProblem(503, "not-ready") {
			notReady = true
		}
		// A dial, not a request: a request accepted in the instant before
		// the listener closed would be proxied to the upstream, which holds
		// every call for 2 s, and outlast the call this loop waits beside.
		if c, err := net.DialTimeout("tcp", a.addr(), time.Second); err != nil {
			listenerClosed = true
		} else {
			_ = c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !notReady {
		t.Errorf("/readyz never answered 503 not-ready while the drain waited for the call")
	}
	if !listenerClosed {
		t.Errorf("the proxy listener still accepted connections during the drain")
	}

	first := <-done
	at := <-answeredAt
	if first.Err != nil || first.Status != 201 || first.replayed() {
		t.Fatalf("request in flight at SIGTERM: %v, want the upstream's 201", first)
	}
	code, exitAt := a.waitExit(15 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0:\n%s", code, a.Logs())
	}
	if exitAt.Before(at) {
		t.Fatalf("the process exited before the client had its answer")
	}

	rec := adminDo(t, "GET", recordURL(b, "default", "alice", "drain-1", ""), adminToken)
	if rec.Status != 200 || !strings.Contains(string(rec.Body), `"state":"completed"`) {
		t.Fatalf("record after the drain: %v, want completed", rec)
	}
	up.Set(nil, 0, nil)
	again := mustPost(t, b.URL+"/v1/orders", "alice", "drain-1", `{"n":1}`)
	if again.Status != 201 || !again.replayed() || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("retry through the second instance: %v, want a replay of %s", again, first.Body)
	}
	if n := up.Calls("alice", "drain-1"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestShutdownTimeoutShorterThanUpstreamIsRefused: the real binary
// refuses to start with a server.shutdown_timeout that a call in flight at
// SIGTERM could outlast, and the error names both keys.
func TestShutdownTimeoutShorterThanUpstreamIsRefused(t *testing.T) {
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
