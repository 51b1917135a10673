package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// startGateFlags starts idemgate with args and no config file (README's
// way (a): flags and the environment only), on free loopback ports, and
// waits until /healthz answers. The process is stopped in t.Cleanup.
func startGateFlags(t *testing.T, mode string, args ...string) *Gate {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	g := &Gate{t: t, URL: "http://" + listen, AdminURL: "http://" + adminListen,
		args: append([]string{mode, "--listen", listen, "--admin-listen", adminListen, "--log-format", "json"}, args...), logs: &syncbuf.Buffer{}}
	g.Start()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("idemgate logs (%s):\n%s", listen, g.logs.String())
		}
	})
	return g
}

// postAsBearer is post for the built-in defaults, whose owner is the
// Authorization field: the bearer token and X-User (which the test upstream
// counts by) are both the owner's name.
func postAsBearer(d time.Duration, url, owner, key, body string) Answer {
	return postHeaders(d, url, "", body, http.Header{"Authorization": {"Bearer " + owner}, "X-User": {owner}, "Idempotency-Key": {key}})
}

// alive reports whether g's process is still running.
func (g *Gate) alive() bool {
	g.mu.Lock()
	exited := g.exited
	g.mu.Unlock()
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// TestSIGHUPNeverKills: SIGHUP is how nginx and systemd reload, and its
// default action ends a Go process at once (exit status 129): a keyed call
// in flight got an empty reply while the upstream carried the operation
// out, and with a shared store a retry later took its claim over and ran it
// again. In every mode the signal is caught: with a config file it
// reloads, without one idemgate says there is nothing to reload and keeps
// serving. Each mode: SIGHUP during a slow keyed call, the call completes
// and records, a retry on a second instance replays, one execution.
func TestSIGHUPNeverKills(t *testing.T) {
	for _, mode := range []string{"flags only", "config file"} {
		t.Run(mode, func(t *testing.T) {
			v := valkeytest.Start(t)
			up := startUpstream(t)
			var a, b *Gate
			if mode == "flags only" {
				flags := []string{"--upstream", up.URL, "--store", "valkey", "--valkey-addrs", v.Addr(), "--wait-store", "10s"}
				a, b = startGateFlags(t, "serve", flags...), startGateFlags(t, "serve", flags...)
			} else {
				c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken}
				a, b = startGate(t, c), startGate(t, c)
			}
			entered := make(chan struct{}, 1)
			up.Set(nil, 1500*time.Millisecond, entered)
			first := make(chan Answer, 1)
			go func() { first <- postAsBearer(20*time.Second, a.URL+"/v1/orders", "alice", "hup-1", `{"n":1}`) }()
			waitEntered(t, entered, 10*time.Second)
			a.send(syscall.SIGHUP)

			got := <-first
			if got.Err != nil || got.Status != 201 || got.replayed() {
				t.Fatalf("the keyed call in flight during SIGHUP: %v, want its 201", got)
			}
			if !a.alive() {
				t.Fatalf("idemgate exited on SIGHUP:\n%s", a.Logs())
			}
			up.Set(nil, 0, nil)
			retry := postAsBearer(10*time.Second, b.URL+"/v1/orders", "alice", "hup-1", `{"n":1}`)
			if retry.Status != 201 || !retry.replayed() || string(retry.Body) != string(got.Body) {
				t.Fatalf("retry on a second instance: %v, want the replay of %s", retry, got.Body)
			}
			if n := up.Calls("alice", "hup-1"); n != 1 {
				t.Fatalf("the upstream executed the operation %d times, want 1", n)
			}
			// The instance that got SIGHUP still serves.
			if again := postAsBearer(10*time.Second, a.URL+"/v1/orders", "alice", "hup-2", `{"n":2}`); again.Status != 201 {
				t.Fatalf("a new call after SIGHUP: %v", again)
			}
			want := `"config reloaded"`
			if mode == "flags only" {
				want = "nothing to reload"
			}
			eventually(t, 5*time.Second, "the reload's log line", func() bool { return strings.Contains(a.Logs(), want) })
		})
	}

	// idemgate demo runs its own example API, so no slow call can be held
	// open; the process must survive SIGHUP and go on forwarding and
	// replaying.
	t.Run("demo", func(t *testing.T) {
		api := fmt.Sprintf("http://127.0.0.1:%d", valkeytest.FreePort(t))
		g := startGateFlags(t, "demo", "--upstream", api)
		for range 3 {
			g.send(syscall.SIGHUP)
		}
		eventually(t, 5*time.Second, "the reload's log line", func() bool { return strings.Contains(g.Logs(), "nothing to reload") })
		if !g.alive() {
			t.Fatalf("idemgate demo exited on SIGHUP:\n%s", g.Logs())
		}
		first := postAsBearer(10*time.Second, g.URL+"/v1/orders", "alice", "demo-1", `{"amount":5}`)
		retry := postAsBearer(10*time.Second, g.URL+"/v1/orders", "alice", "demo-1", `{"amount":5}`)
		if first.Status != 201 || retry.Status != 201 || !retry.replayed() || string(retry.Body) != string(first.Body) {
			t.Fatalf("demo after SIGHUP: first %v, retry %v, want 201 and its replay", first, retry)
		}
	})
}
