package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// lifecycleYAML is idemgate's configuration for the process lifecycle
// tests: a 2 s lease, so that an abandoned claim ends soon, duplicates of
// a running call refused at once (409) rather than waiting, and
// on_abandoned %s.
const lifecycleYAML = `
store:
  driver: valkey
upstream:
  timeout: 20s
log:
  access: false
defaults:
  owner: "header:X-User"
  lease: 2s
  wait_timeout: 1s
  concurrent: conflict
  on_abandoned: %s
`

// replayedAfterRestart waits (30 s at most) for c to exit once its last
// call ended, restarts it, and checks that alice's retry of key k is the
// replay of first and that the upstream ran once.
func replayedAfterRestart(t *testing.T, c *caddyProc, up *upstream, first answer) {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("Caddy did not exit after its last call\n%s", c.out.String())
	}
	c = c.restart(t)
	sameResponse(t, first, post(t, c.URL, "alice", "k", `{"amount":1}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// lifecycleLease is lifecycleYAML's lease.
const lifecycleLease = 2 * time.Second

// signal sends sig to Caddy and waits (up to 30 s, then SIGKILL) for it
// to exit.
func (c *caddyProc) signal(sig syscall.Signal) {
	gatetest.Signal(c.cmd.Process, c.exited, sig, 30*time.Second)
}

// restart runs Caddy again, after c exited, on c's files and ports (the
// same Host, so the same key scope) as a process manager would, and stops
// it in t.Cleanup.
func (c *caddyProc) restart(t *testing.T) *caddyProc {
	t.Helper()
	select {
	case <-c.exited:
	default:
		t.Fatal("restart of a Caddy that still runs")
	}
	n := &caddyProc{URL: c.URL, AdminURL: c.AdminURL, out: &syncbuf.Buffer{}, exited: make(chan struct{}),
		dir: c.dir, port: c.port, adminPort: c.adminPort}
	n.cmd = exec.Command(caddyBinary, "run", "--config", filepath.Join(c.dir, "Caddyfile"), "--adapter", "caddyfile")
	n.cmd.Dir = c.dir
	n.cmd.Env = append(os.Environ(), "HOME="+c.dir, "XDG_CONFIG_HOME="+c.dir, "XDG_DATA_HOME="+c.dir)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("restart caddy: %v", err)
	}
	go func() {
		_ = n.cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(n.stop)
	gatetest.Eventually(t, 30*time.Second, "the restarted Caddy to answer", func() bool {
		resp, err := http.Get(n.URL + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return n
}

// lifecycleSite is a site on the Valkey at addr, under prefix, with
// lifecycleYAML (on_abandoned onAbandoned), before reverse_proxy to up.
func lifecycleSite(addr, prefix, onAbandoned, up string) caddySite {
	return caddySite{
		YAML:        fmt.Sprintf(lifecycleYAML, onAbandoned),
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix %s", addr, prefix),
		After:       "reverse_proxy " + strings.TrimPrefix(up, "http://"),
	}
}

// checkAbandoned retries alice's POST of body with key at url after the
// Caddy that held its claim died during the call sent at sent: a reject
// route answers 409 (request-in-progress, then outcome-unknown) and never
// runs the operation again; a takeover route runs it again only once the
// lease has ended, and replays that run after.
func checkAbandoned(t *testing.T, url, key, body, onAbandoned string, sent time.Time, up *upstream) {
	t.Helper()
	var last answer
	gatetest.Eventually(t, 20*time.Second, "the abandoned claim's final answer", func() bool {
		last = post(t, url, "alice", key, body)
		if last.Status == http.StatusConflict && strings.HasSuffix(problemType(last), "request-in-progress") {
			return false
		}
		return true
	})
	switch onAbandoned {
	case "reject":
		if last.Status != http.StatusConflict || !strings.HasSuffix(problemType(last), "outcome-unknown") {
			t.Fatalf("retry after the holder died, the lease over: %d %s, want 409 outcome-unknown", last.Status, last.Body)
		}
		if n := up.execs.Load(); n != 1 {
			t.Fatalf("upstream executed %d times, want 1 (reject never runs an unknown outcome again)", n)
		}
	case "takeover":
		if took := time.Since(sent); last.Status != http.StatusCreated || last.replayed() || took < lifecycleLease {
			t.Fatalf("retry %v after the first: %d %s (replayed %v), want the takeover's fresh 201 no sooner than the %v lease",
				took, last.Status, last.Body, last.replayed(), lifecycleLease)
		}
		if n := up.execs.Load(); n != 2 {
			t.Fatalf("upstream executed %d times, want 2 (the killed call and the takeover)", n)
		}
		sameResponse(t, last, post(t, url, "alice", key, body))
	}
}

// TestCaddyKilledMidCall: Caddy is SIGKILLed while reverse_proxy's
// upstream runs the call, which then answers into the void. Restarted on
// the same Valkey, Caddy answers the retry 409 while the dead claim's
// lease runs; after it, a reject route (the default) answers
// outcome-unknown and never runs the operation again, and a takeover
// route runs it again, no sooner than the lease's end.
func TestCaddyKilledMidCall(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, onAbandoned := range []string{"reject", "takeover"} {
		t.Run(onAbandoned, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			c := runCaddy(t, lifecycleSite(vk.Addr(), "caddy-killed-"+onAbandoned+":", onAbandoned, up.URL))
			sent := time.Now()
			first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			c.signal(syscall.SIGKILL)
			close(up.hold) // the killed call answers into the void
			if r := <-first; r.err == nil {
				t.Fatalf("the client of a killed Caddy got an answer: %d %s", r.a.Status, r.a.Body)
			}
			c = c.restart(t)
			checkAbandoned(t, c.URL, "k", `{"amount":1}`, onAbandoned, sent, up)
		})
	}
}

// TestCaddyKilledMidCallRetryOnAnotherInstance: two Caddy instances on one
// Valkey serve one site (api.example, as behind a load balancer); the one
// running the call is SIGKILLed, and the client's retry reaches the other:
// 409 while the claim's lease runs, then outcome-unknown on a reject
// route, the takeover's one second run on a takeover route.
func TestCaddyKilledMidCallRetryOnAnotherInstance(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, onAbandoned := range []string{"reject", "takeover"} {
		t.Run(onAbandoned, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			site := caddySite{
				YAML:        fmt.Sprintf(lifecycleYAML, onAbandoned),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-killed-two-%s:", vk.Addr(), onAbandoned),
				Hosts:       map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")},
			}
			a, b := runCaddy(t, site), runCaddy(t, site)
			sent := time.Now()
			first := make(chan error, 1)
			go func() {
				_, err := tryPostHost(a.URL, "api.example", "alice", "k", `{"amount":1}`)
				first <- err
			}()
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			a.signal(syscall.SIGKILL)
			close(up.hold) // the killed call answers into the void
			if err := <-first; err == nil {
				t.Fatal("the client of a killed Caddy got an answer")
			}
			var last answer
			gatetest.Eventually(t, 20*time.Second, "the abandoned claim's final answer", func() bool {
				last = postHost(t, b.URL, "api.example", "alice", "k", `{"amount":1}`)
				return last.Status != http.StatusConflict || !strings.HasSuffix(problemType(last), "request-in-progress")
			})
			switch onAbandoned {
			case "reject":
				if last.Status != http.StatusConflict || !strings.HasSuffix(problemType(last), "outcome-unknown") || up.execs.Load() != 1 {
					t.Fatalf("retry on the other instance: %d %s with %d upstream runs, want 409 outcome-unknown and 1 run", last.Status, last.Body, up.execs.Load())
				}
			case "takeover":
				if took := time.Since(sent); last.Status != http.StatusCreated || took < lifecycleLease || up.execs.Load() != 2 {
					t.Fatalf("retry on the other instance %v after the first: %d %s with %d upstream runs, want the takeover's 201 after the %v lease, 2 runs",
						took, last.Status, last.Body, up.execs.Load(), lifecycleLease)
				}
			}
		})
	}
}

// TestCaddyKilledBeforeRecording: Valkey goes away (kept on disk) while
// the upstream acts, so the response cannot be recorded; the reject
// route's client gets it at once (it is pending in Caddy's memory), then
// Caddy is SIGKILLed with it, and Valkey comes back with the claim. The
// retry, to the restarted Caddy, is never run again on the reject route
// (409, then outcome-unknown); on a takeover route the client was not
// given the unrecorded response (503), and the takeover after the lease
// is the one second run the route chose.
func TestCaddyKilledBeforeRecording(t *testing.T) {
	for _, onAbandoned := range []string{"reject", "takeover"} {
		t.Run(onAbandoned, func(t *testing.T) {
			vk := valkeytest.Start(t, valkeytest.WithAOF())
			up := startUpstream(t)
			up.hold = make(chan struct{})
			c := runCaddy(t, lifecycleSite(vk.Addr(), "caddy-unrecorded:", onAbandoned, up.URL))
			sent := time.Now()
			first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			vk.Kill()
			close(up.hold)
			r := <-first
			if r.err != nil {
				t.Fatal(r.err)
			}
			switch onAbandoned {
			case "reject":
				if r.a.Status != http.StatusCreated {
					t.Fatalf("first on a reject route with the store gone: %d %s, want the upstream's 201", r.a.Status, r.a.Body)
				}
			case "takeover":
				if r.a.Status != http.StatusServiceUnavailable {
					t.Fatalf("first on a takeover route with the store gone: %d %s, want 503 (the response withheld)", r.a.Status, r.a.Body)
				}
			}
			c.signal(syscall.SIGKILL) // the only copy of the response goes with it
			vk.Restart()
			c = c.restart(t)
			c.waitMetric(t, "idemgate_store_up 1")
			checkAbandoned(t, c.URL, "k", `{"amount":1}`, onAbandoned, sent, up)
		})
	}
}

// TestCaddyGracefulStopMidCall: Caddy told to stop (SIGTERM, SIGINT, the
// admin API's /stop as caddy stop sends it) while the upstream runs a
// call finishes that call: its client gets the upstream's answer, the
// response is recorded, and the retry, to Caddy restarted, is its replay.
func TestCaddyGracefulStopMidCall(t *testing.T) {
	vk := valkeytest.Start(t)
	stops := map[string]func(t *testing.T, c *caddyProc){
		"SIGTERM": func(_ *testing.T, c *caddyProc) { _ = c.cmd.Process.Signal(syscall.SIGTERM) },
		"SIGINT":  func(_ *testing.T, c *caddyProc) { _ = c.cmd.Process.Signal(syscall.SIGINT) },
		"caddy stop": func(t *testing.T, c *caddyProc) {
			// The admin API answers once the process has begun to exit.
			go func() {
				if resp, err := http.Post(c.AdminURL+"/stop", "", nil); err == nil {
					resp.Body.Close()
				}
			}()
		},
	}
	for name, stop := range stops {
		t.Run(name, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			c := runCaddy(t, lifecycleSite(vk.Addr(), "caddy-stop-"+strings.ReplaceAll(name, " ", "-")+":", "takeover", up.URL))
			first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			stop(t, c)
			gatetest.Eventually(t, 20*time.Second, "Caddy to begin its shutdown", func() bool {
				return strings.Contains(c.out.String(), "servers shutting down")
			})
			close(up.hold)
			r := <-first
			if r.err != nil {
				t.Fatalf("the client of a Caddy stopping gracefully got no answer: %v\n%s", r.err, c.out.String())
			}
			if r.a.Status != http.StatusCreated {
				t.Fatalf("first: %d %s, want the upstream's 201", r.a.Status, r.a.Body)
			}
			replayedAfterRestart(t, c, up, r.a)
		})
	}
}

// TestCaddyGracePeriodShorterThanTheCall: Caddy's grace_period (1 s) ends
// before the call the upstream runs does. Caddy then exits without its
// servers' requests, but the module keeps the process until its calls in
// flight have ended and their responses are recorded (within
// server.shutdown_timeout, upstream.timeout plus a margin by default), as
// the standalone proxy drains (it refuses a shutdown_timeout shorter than
// upstream.timeout): the client gets its answer, and the retry to the
// restarted Caddy is its replay. Cut off, the call's claim was left
// running: outcome-unknown on a reject route, and on a takeover route the
// operation ran again once the lease ended.
func TestCaddyGracePeriodShorterThanTheCall(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, onAbandoned := range []string{"reject", "takeover"} {
		t.Run(onAbandoned, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			site := lifecycleSite(vk.Addr(), "caddy-grace-"+onAbandoned+":", onAbandoned, up.URL)
			site.Global = "grace_period 1s"
			c := runCaddy(t, site)
			first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			gatetest.Eventually(t, 20*time.Second, "the grace period to end", func() bool {
				select {
				case <-c.exited:
					return true
				default:
					return strings.Contains(c.out.String(), "graceful shutdown 1s timeout")
				}
			})
			close(up.hold)
			r := <-first
			if r.err != nil || r.a.Status != http.StatusCreated {
				t.Fatalf("the client of the call in flight past the grace period: %v %d %s, want the upstream's 201\n%s", r.err, r.a.Status, r.a.Body, c.out.String())
			}
			replayedAfterRestart(t, c, up, r.a)
		})
	}
}

// TestCaddyReloadGracePeriodShorterThanTheCall: a reload whose old
// servers' grace_period (1 s) ends before the call they still run does:
// the call goes on (Caddy's servers do not cut it), its client gets its
// answer, and the retry is its replay, the upstream having run once.
func TestCaddyReloadGracePeriodShorterThanTheCall(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	up.hold = make(chan struct{})
	site := lifecycleSite(vk.Addr(), "caddy-reload-grace:", "takeover", up.URL)
	site.Global = "grace_period 1s"
	c := runCaddy(t, site)
	first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
	gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		close(up.hold)
		t.Fatalf("reload: %v", err)
	}
	gatetest.Eventually(t, 20*time.Second, "the old servers' grace period to end", func() bool {
		return strings.Contains(c.out.String(), "graceful shutdown 1s timeout")
	})
	close(up.hold)
	r := <-first
	if r.err != nil || r.a.Status != http.StatusCreated {
		t.Fatalf("the client of the call in flight past the reload's grace period: %v %d %s, want the upstream's 201", r.err, r.a.Status, r.a.Body)
	}
	sameResponse(t, r.a, postAfterReload(t, c.URL, "alice", "k", `{"amount":1}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyStopAfterReloadMidCall: a call still running in the
// configuration a reload replaced when Caddy is stopped, its grace_period
// (1 s) shorter than the call: Caddy keeps the process for it as for a
// call of the running configuration, the client gets its answer and the
// retry to Caddy restarted is its replay.
func TestCaddyStopAfterReloadMidCall(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	up.hold = make(chan struct{})
	site := lifecycleSite(vk.Addr(), "caddy-stop-reloaded:", "takeover", up.URL)
	site.Global = "grace_period 1s"
	c := runCaddy(t, site)
	first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
	gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		close(up.hold)
		t.Fatalf("reload: %v", err)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	gatetest.Eventually(t, 20*time.Second, "the grace periods to end", func() bool {
		select {
		case <-c.exited:
			return true
		default:
			return strings.Contains(c.out.String(), "exiting: waiting for the keyed calls in flight")
		}
	})
	close(up.hold)
	r := <-first
	if r.err != nil || r.a.Status != http.StatusCreated {
		t.Fatalf("the client of the call in flight across the reload and the stop: %v %d %s, want the upstream's 201", r.err, r.a.Status, r.a.Body)
	}
	replayedAfterRestart(t, c, up, r.a)
}

// TestCaddyStopRecordsAPendingResponse: Valkey goes away (kept on disk)
// while the upstream acts, so the reject route's client gets the response
// with its completion still to record; Caddy is then stopped (SIGTERM)
// and Valkey comes back while it exits. Caddy records the response before
// it exits, as the standalone proxy drains its pending responses, and the
// retry to Caddy restarted is the replay rather than outcome-unknown.
func TestCaddyStopRecordsAPendingResponse(t *testing.T) {
	vk := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	up.hold = make(chan struct{})
	c := runCaddy(t, lifecycleSite(vk.Addr(), "caddy-stop-pending:", "reject", up.URL))
	first := postAsync(tryPost, c.URL, "alice", "k", `{"amount":1}`)
	gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
	vk.Kill()
	close(up.hold)
	r := <-first
	if r.err != nil || r.a.Status != http.StatusCreated {
		t.Fatalf("first with the store gone: %v %d %s, want the upstream's 201", r.err, r.a.Status, r.a.Body)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	gatetest.Eventually(t, 20*time.Second, "Caddy waiting for the response to record, or gone", func() bool {
		select {
		case <-c.exited:
			return true
		default:
			return strings.Contains(c.out.String(), "waiting for the keyed calls in flight")
		}
	})
	vk.Restart()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("Caddy did not exit once Valkey was back\n%s", c.out.String())
	}
	c = c.restart(t)
	c.waitMetric(t, "idemgate_store_up 1")
	sameResponse(t, r.a, post(t, c.URL, "alice", "k", `{"amount":1}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyClientGoneMidCall: a client that leaves while the upstream
// runs its call (its connection closed: HTTP/1; its stream reset,
// RST_STREAM: HTTP/2 over h2c) does not cancel the call: the response is
// recorded, and the retry is its replay, the upstream having run once.
func TestCaddyClientGoneMidCall(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, proto := range []string{"http1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			site := lifecycleSite(vk.Addr(), "caddy-gone-"+proto+":", "reject", up.URL)
			site.Global = "servers {\n\t\tprotocols h1 h2c\n\t}"
			c := runCaddy(t, site)
			tr := &http.Transport{}
			if proto == "h2c" {
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			gone := make(chan error, 1)
			var gotProto string
			go func() {
				resp, _, err := gatetest.Post(ctx, &http.Client{Transport: tr}, c.URL+"/orders", "", gatetest.Keyed("alice", "k"), `{"amount":1}`)
				if resp != nil {
					gotProto = resp.Proto
				}
				gone <- err
			}()
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			cancel() // HTTP/1: the connection closed; HTTP/2: RST_STREAM(CANCEL)
			if err := <-gone; err == nil {
				t.Fatalf("the client's cancel did not end its request (%s)", gotProto)
			}
			close(up.hold)
			var retry answer
			gatetest.Eventually(t, 20*time.Second, "the retry answered 201", func() bool {
				retry = post(t, c.URL, "alice", "k", `{"amount":1}`)
				return retry.Status == http.StatusCreated
			})
			if !retry.replayed() || up.execs.Load() != 1 {
				t.Fatalf("retry after the client left: %d %s (replayed %v) with %d upstream runs, want the replay and 1 run",
					retry.Status, retry.Body, retry.replayed(), up.execs.Load())
			}
		})
	}
}

// TestCaddyClientGoneMidBody: a client that leaves before its body is
// all sent, or sends it slower than Caddy's read_body timeout, reaches no
// upstream and leaves no claim: the whole request, sent again, runs once.
func TestCaddyClientGoneMidBody(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, how := range []string{"closed", "read_body timeout"} {
		t.Run(how, func(t *testing.T) {
			up := startUpstream(t)
			site := lifecycleSite(vk.Addr(), "caddy-midbody-"+strings.ReplaceAll(how, " ", "-")+":", "reject", up.URL)
			site.Global = "servers {\n\t\ttimeouts {\n\t\t\tread_body 1s\n\t\t}\n\t}"
			c := runCaddy(t, site)
			conn, err := net.Dial("tcp", strings.TrimPrefix(c.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := `{"amount":1}`
			fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: %s\r\nX-User: alice\r\nIdempotency-Key: k\r\n"+
				"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", strings.TrimPrefix(c.URL, "http://"), len(body), body[:5])
			if how == "closed" {
				_ = conn.Close()
			} else {
				// Caddy ends the read at its timeout and answers, or closes.
				_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
				buf := make([]byte, 4096)
				n, _ := conn.Read(buf)
				if strings.HasPrefix(string(buf[:n]), "HTTP/1.1 2") {
					t.Fatalf("a request whose body never came was answered %q", buf[:n])
				}
			}
			var a answer
			gatetest.Eventually(t, 20*time.Second, "the whole request answered", func() bool {
				a = post(t, c.URL, "alice", "k", body)
				return a.Status != http.StatusConflict
			})
			if a.Status != http.StatusCreated || a.replayed() || up.execs.Load() != 1 {
				t.Fatalf("the whole request after one cut mid-body: %d %s (replayed %v) with %d upstream runs, want a fresh 201 and 1 run",
					a.Status, a.Body, a.replayed(), up.execs.Load())
			}
		})
	}
}

// TestCaddyClientTimeoutRetryRacesTheOriginal: a client gives up on a call
// still at the upstream and retries at once, to the same Caddy or to
// another on the same Valkey: the retry waits for the original (concurrent:
// wait) and is replayed its answer, or is refused 409 while it runs; the
// upstream runs once, and a later retry is the replay.
func TestCaddyClientTimeoutRetryRacesTheOriginal(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, where := range []string{"same instance", "other instance"} {
		t.Run(where, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			site := caddySite{
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-race-%s:", vk.Addr(), strings.ReplaceAll(where, " ", "-")),
				Hosts:       map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")},
			}
			a := runCaddy(t, site)
			b := a
			if where == "other instance" {
				b = runCaddy(t, site)
			}
			ctx, cancel := context.WithCancel(context.Background())
			gaveUp := make(chan error, 1)
			go func() {
				_, _, err := gatetest.Post(ctx, nil, a.URL+"/orders", "api.example", gatetest.Keyed("alice", "k"), `{"amount":1}`)
				gaveUp <- err
			}()
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			cancel()
			<-gaveUp
			retry := make(chan result, 1)
			go func() {
				r, err := tryPostHost(b.URL, "api.example", "alice", "k", `{"amount":1}`)
				retry <- result{r, err}
			}()
			gatetest.Eventually(t, 20*time.Second, "the retry waiting", func() bool {
				return b.adminMetric(t, `idemgate_waiters{idemgate_handler="api.example"} `) == "1" || up.execs.Load() > 1
			})
			close(up.hold)
			r := <-retry
			if r.err != nil {
				t.Fatal(r.err)
			}
			if up.execs.Load() != 1 || r.a.Status != http.StatusCreated || !r.a.replayed() {
				t.Fatalf("retry racing the original: %d %s (replayed %v) with %d upstream runs, want the original's answer replayed and 1 run",
					r.a.Status, r.a.Body, r.a.replayed(), up.execs.Load())
			}
			if later := postHost(t, a.URL, "api.example", "alice", "k", `{"amount":1}`); !later.replayed() || later.Body != r.a.Body {
				t.Fatalf("later retry: %d %s (replayed %v), want the replay of %s", later.Status, later.Body, later.replayed(), r.a.Body)
			}
		})
	}
}
