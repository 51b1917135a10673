package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// conflictYAML is idemgate's configuration with upstream.timeout %s and
// duplicates of a running call refused at once (409) instead of waiting
// for its lease to end.
const conflictYAML = `
store:
  driver: valkey
upstream:
  timeout: %s
log:
  access: false
defaults:
  owner: "header:X-User"
  lease: 5s
  wait_timeout: 1s
  concurrent: conflict
`

// TestCaddyUpstreamFailureAfterSendKeepsTheClaim: reverse_proxy returns an
// error with nothing written after its upstream has the request, and the
// upstream may have acted: killed mid-call (502), past reverse_proxy's
// response_header_timeout (504), or past the idempotency handler's own
// timeout (upstream.timeout, which ends the call's context: 504). The
// outcome is unknown, as the standalone proxy's for the same upstream:
// the client gets upstream-failed or upstream-timeout, the retry is
// refused 409 while the claim runs out, and the upstream runs once. (A
// dial failure still releases the key: TestCaddyNextErrorReleasesKey.)
func TestCaddyUpstreamFailureAfterSendKeepsTheClaim(t *testing.T) {
	cases := []struct {
		name      string
		upstream  gatetest.Counted
		timeout   string // upstream.timeout
		transport string // reverse_proxy's block
		status    int
		problem   string
	}{
		{
			name:     "killed mid-call",
			timeout:  "10s",
			upstream: func(w http.ResponseWriter, _ *http.Request, _ int64) { gatetest.Die(w) },
			status:   http.StatusBadGateway, problem: "upstream-failed",
		},
		{
			name:      "response_header_timeout 1s under a 2s call",
			timeout:   "10s",
			upstream:  sleepThenCreate(2 * time.Second),
			transport: "transport http {\n\t\t\tresponse_header_timeout 1s\n\t\t}",
			status:    http.StatusGatewayTimeout, problem: "upstream-timeout",
		},
		{
			name:     "upstream.timeout 1s under a 2s call",
			upstream: sleepThenCreate(2 * time.Second),
			timeout:  "1s",
			status:   http.StatusGatewayTimeout, problem: "upstream-timeout",
		},
	}
	vk := valkeytest.Start(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var execs atomic.Int64
			up := gatetest.CountingUpstream(t, &execs, tc.upstream)
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, tc.timeout),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-unknown-%d:", vk.Addr(), i),
				After:       fmt.Sprintf("reverse_proxy %s {\n\t\t%s\n\t}", strings.TrimPrefix(up.URL, "http://"), tc.transport),
			})

			first := post(t, c.URL, "alice", "k", `{"amount":1}`)
			retry := post(t, c.URL, "alice", "k", `{"amount":1}`)
			if n := execs.Load(); n != 1 {
				t.Fatalf("upstream executed %d times, want 1 (first: %d %q; retry: %d %q)", n, first.Status, first.Body, retry.Status, retry.Body)
			}
			if first.Status != tc.status || !strings.HasSuffix(problemType(first), tc.problem) {
				t.Fatalf("first: %d %s; want %d %s\n%s", first.Status, first.Body, tc.status, tc.problem, c.out.String())
			}
			if retry.Status != http.StatusConflict || retry.replayed() {
				t.Fatalf("retry: %d %s; want 409 while the outcome is unknown", retry.Status, retry.Body)
			}
		})
	}
}

// sleepThenCreate is an upstream call that acts, takes d, then answers
// 201.
func sleepThenCreate(d time.Duration) gatetest.Counted {
	return func(w http.ResponseWriter, _ *http.Request, _ int64) {
		time.Sleep(d)
		w.WriteHeader(http.StatusCreated)
	}
}

// TestCaddyNestedIdempotencyRunsOnce: two idempotency handlers in one
// route on one Valkey (the site's, and one inside a route block after
// it). The
// inner one finds the request inside the outer one's call and passes it
// through: the upstream runs once and the retry is replayed, instead of
// the inner claim waiting on the outer one until wait_timeout.
func TestCaddyNestedIdempotencyRunsOnce(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	yaml := fmt.Sprintf(conflictYAML, "10s")
	cfgPath := filepath.Join(t.TempDir(), "inner.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	inner := fmt.Sprintf("config %s\n\t\t\tstore_addrs %s\n\t\t\tkey_prefix caddy-nested:\n\t\t\tname inner", cfgPath, vk.Addr())
	c := runCaddy(t, caddySite{
		YAML: yaml,
		// The site's idempotency before the route that holds the other
		// one (by default route comes first, and one engine would run).
		Global:      "order idempotency first",
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-nested:\n\t\tname outer", vk.Addr()),
		After: fmt.Sprintf("route {\n\t\tidempotency {\n\t\t\t%s\n\t\t}\n\t\treverse_proxy %s\n\t}",
			inner, strings.TrimPrefix(up.URL, "http://")),
	})
	first := post(t, c.URL, "alice", "k", `{"amount":1}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s; want 201\n%s", first.Status, first.Body, c.out.String())
	}
	sameResponse(t, first, post(t, c.URL, "alice", "k", `{"amount":1}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyNoUpstreamReleasesKey: reverse_proxy with its only upstream
// marked down by its passive health check returns "no upstreams
// available" (503) without trying any: nothing was sent, so the key is
// released as after a dial failure, the client gets the same 502
// upstream-unreachable, and the retry runs once the upstream is back.
func TestCaddyNoUpstreamReleasesKey(t *testing.T) {
	vk := valkeytest.Start(t)
	port := valkeytest.FreePort(t) // nothing listens there yet
	c := runCaddy(t, caddySite{
		YAML:        fmt.Sprintf(conflictYAML, "10s"),
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-noupstream:", vk.Addr()),
		After:       fmt.Sprintf("reverse_proxy 127.0.0.1:%d {\n\t\tfail_duration 3s\n\t\tmax_fails 1\n\t}", port),
	})
	// runCaddy's readiness probe met the dial failure that marks the
	// upstream down; should fail_duration have passed already, the first
	// POST's dial failure (released) marks it again, and the second finds
	// no upstream.
	for range 2 {
		a := post(t, c.URL, "alice", "k", `{"amount":1}`)
		if a.Status != http.StatusBadGateway || !strings.HasSuffix(problemType(a), "upstream-unreachable") {
			t.Fatalf("upstream marked down: %d %q, want 502 upstream-unreachable\n%s", a.Status, a.Body, c.out.String())
		}
	}
	if !strings.Contains(c.out.String(), "no upstreams available") {
		t.Fatalf("reverse_proxy never found its upstream marked down:\n%s", c.out.String())
	}
	up := serveOn(t, port)
	// A GET is not enforced: it reaches the upstream once fail_duration
	// has passed.
	if !gatetest.Until(10*time.Second, gatetest.Serves(c.URL+"/ready", http.StatusOK)) {
		t.Fatalf("the upstream was not back in reverse_proxy within 10s")
	}
	checkRetryRunsOnce(t, c.URL, "k", `{"amount":1}`, up, "back")
}

// TestCaddyDialFailureAfterAnUpstreamActedKeepsTheClaim: reverse_proxy
// returns a dial failure (or "no upstreams available") at the end of a
// call in which an upstream already had the request: an upstream that
// acted and answered, then a handle_response route whose own
// reverse_proxy cannot dial (the X-Accel-Redirect pattern); or an
// upstream that acted and died, then reverse_proxy's retry (lb_retry_match,
// lb_retries) on another upstream that cannot be dialed. The last error
// says nothing was sent, but the call did send: the outcome is unknown,
// the retry is refused 409, and the upstream runs once.
func TestCaddyDialFailureAfterAnUpstreamActedKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	cases := []struct {
		name     string
		upstream gatetest.Counted
		proxy    func(up string, dead int) string
	}{
		{
			name: "handle_response reverse_proxy that cannot dial",
			upstream: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				w.Header().Set("X-Accel-Redirect", "/receipt")
				w.WriteHeader(http.StatusCreated)
			},
			proxy: func(up string, dead int) string {
				return fmt.Sprintf("reverse_proxy %s {\n\t\t@accel header X-Accel-Redirect *\n\t\thandle_response @accel {\n\t\t\treverse_proxy 127.0.0.1:%d\n\t\t}\n\t}", up, dead)
			},
		},
		{
			name:     "lb_retry_match onto an upstream that cannot dial",
			upstream: func(w http.ResponseWriter, _ *http.Request, _ int64) { gatetest.Die(w) },
			proxy: func(up string, dead int) string {
				return fmt.Sprintf("reverse_proxy %s 127.0.0.1:%d {\n\t\tlb_policy first\n\t\tlb_retries 1\n\t\tfail_duration 30s\n\t\tmax_fails 1\n\t\tlb_retry_match {\n\t\t\tmethod POST\n\t\t}\n\t}", up, dead)
			},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var execs atomic.Int64
			up := gatetest.CountingUpstream(t, &execs, tc.upstream)
			dead := valkeytest.FreePort(t) // nothing listens there
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s"),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-acted-%d:", vk.Addr(), i),
				After:       tc.proxy(strings.TrimPrefix(up.URL, "http://"), dead),
			})
			first := post(t, c.URL, "alice", "k", `{"amount":1}`)
			retry := post(t, c.URL, "alice", "k", `{"amount":1}`)
			checkRanOnceThenRefused(t, c, execs.Load(), first, retry)
		})
	}
}

// TestCaddyEmptyBodyNotResentOnReusedConnection: a keyed POST without a
// body through reverse_proxy, on a keep-alive connection to the upstream
// that an earlier request left idle; the upstream acts and closes the
// connection without an answer. reverse_proxy gives its transport a nil
// body for a length of 0, and net/http's transport re-sends such a
// request when it carries Idempotency-Key and a reused connection broke:
// the upstream would run it twice. It runs once, with the client's key
// field, and the outcome is unknown.
func TestCaddyEmptyBodyNotResentOnReusedConnection(t *testing.T) {
	vk := valkeytest.Start(t)
	// With header_up (or an https upstream, whose transport sets Host),
	// reverse_proxy builds the outgoing header again with Header.Add,
	// which gives each field its canonical name back.
	for i, block := range []string{"", " {\n\t\theader_up X-Forwarded-Port 443\n\t}"} {
		name := "plain"
		if block != "" {
			name = "header_up"
		}
		t.Run(name, func(t *testing.T) {
			var execs atomic.Int64
			// The GET /warm leaves the connection idle for reuse.
			up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, r *http.Request, _ int64) {
				if r.Header.Get("Idempotency-Key") != "k" {
					t.Errorf("upstream got Idempotency-Key %q, want the client's", r.Header.Get("Idempotency-Key"))
				}
				gatetest.HangUp(w)
			})
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s"),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-reuse-%d:", vk.Addr(), i),
				After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://") + block,
			})
			resp, err := http.Get(c.URL + "/warm")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			first := post(t, c.URL, "alice", "k", "")
			retry := post(t, c.URL, "alice", "k", "")
			checkRanOnceThenRefused(t, c, execs.Load(), first, retry)
		})
	}
}

// TestCaddyRetryAfterSendNeverRunsTwice: reverse_proxy with lb_retry_match
// allowing POST retries the request on another upstream after the first
// one took it and died. The upstream that died may have acted, so the
// second send is cut before a byte of it leaves (sendGuard): the
// upstreams run once between them, and the outcome is unknown. Over
// HTTP/1 the first one resets its connection; over HTTP/2 (h2c) it
// resets its stream, and reverse_proxy retries all the same.
func TestCaddyRetryAfterSendNeverRunsTwice(t *testing.T) {
	vk := valkeytest.Start(t)
	for i, tc := range []struct {
		name     string
		upstream func(t *testing.T, execs *atomic.Int64, handle gatetest.Counted) string
		die      func(http.ResponseWriter)
		// expect sends the request with Expect: 100-continue, which
		// reverse_proxy passes on: the upstream's 100 Continue is a first
		// response byte, and no answer.
		expect bool
	}{
		{"http1", http1Upstream, gatetest.Die, false},
		{"http1 100-continue", http1Upstream, gatetest.Die, true},
		{"http1 mid-header", http1Upstream, dieMidHeader, false},
		{"h2c", h2cUpstream, func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, false},
		{"h2c 100-continue", h2cUpstream, func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var execs atomic.Int64
			dies := tc.upstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) { tc.die(w) })
			answers := tc.upstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
				w.WriteHeader(http.StatusCreated)
			})
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s"),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-lbretry-%d:", vk.Addr(), i),
				After: fmt.Sprintf("reverse_proxy %s %s {\n\t\tlb_policy first\n\t\tlb_retries 1\n\t\tfail_duration 30s\n\t\tmax_fails 1\n\t\tlb_retry_match {\n\t\t\tmethod POST\n\t\t}\n\t}",
					dies, answers),
			})
			send := post
			if tc.expect {
				send = postExpect
			}
			first := send(t, c.URL, "alice", "k", `{"amount":1}`)
			retry := send(t, c.URL, "alice", "k", `{"amount":1}`)
			checkRanOnceThenRefused(t, c, execs.Load(), first, retry)
		})
	}
}

// checkRanOnceThenRefused fails unless the upstreams behind c executed
// once (n) for a key whose outcome is unknown after its first attempt,
// and its retry was refused 409, not replayed.
func checkRanOnceThenRefused(t *testing.T, c *caddyProc, n int64, first, retry answer) {
	t.Helper()
	if n != 1 {
		t.Fatalf("upstream executed %d times, want 1 (first: %d %q; retry: %d %q)\n%s", n, first.Status, first.Body, retry.Status, retry.Body, c.out.String())
	}
	if retry.Status != http.StatusConflict || retry.replayed() {
		t.Fatalf("retry: %d %q (first: %d %q); want 409 while the outcome is unknown\n%s", retry.Status, retry.Body, first.Status, first.Body, c.out.String())
	}
}

// dieMidHeader begins an HTTP/1 answer and resets the connection before
// its header is complete: the upstream acted, and no response came.
func dieMidHeader(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	_, _ = conn.Write([]byte("HTTP/1.1 201 Created\r\nContent-Ty"))
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // RST
	}
	conn.Close()
}
