package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/fcgi"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// loopbackListener listens on a free loopback port, closed in t.Cleanup.
func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// fastCGIUpstream starts a FastCGI server (php-fpm's part) on a loopback
// port, stopped in t.Cleanup, that counts each POST in execs and hands it
// to handle; it returns its address.
func fastCGIUpstream(t *testing.T, execs *atomic.Int64, handle gatetest.Counted) string {
	t.Helper()
	ln := loopbackListener(t)
	go func() {
		_ = fcgi.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusOK)
				return
			}
			handle(w, r, execs.Add(1))
		}))
	}()
	return ln.Addr().String()
}

// dyingFastCGIUpstream starts a FastCGI upstream on a loopback port,
// stopped in t.Cleanup, that reads a request's parameters, counts a POST
// in execs (it acted) and resets the connection without an answer; it
// returns its address.
func dyingFastCGIUpstream(t *testing.T, execs *atomic.Int64) string {
	t.Helper()
	ln := loopbackListener(t)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// FastCGI sends each parameter as its name then its value.
				var got []byte
				buf := make([]byte, 4096)
				for !bytes.Contains(got, []byte("REQUEST_METHODPOST")) && !bytes.Contains(got, []byte("REQUEST_METHODGET")) {
					n, err := conn.Read(buf)
					if err != nil {
						break
					}
					got = append(got, buf[:n]...)
				}
				if bytes.Contains(got, []byte("REQUEST_METHODPOST")) {
					execs.Add(1)
				}
				_ = conn.(*net.TCPConn).SetLinger(0) // RST
				conn.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestCaddyFastCGIDialFailureAfterAnUpstreamActedKeepsTheClaim is
// TestCaddyDialFailureAfterAnUpstreamActedKeepsTheClaim and
// TestCaddyRetryAfterSendNeverRunsTwice with FastCGI upstreams
// (php_fastcgi's transport), which dial without net/http's transport and
// report no connection through its GotConn hook: a FastCGI upstream that
// acted, then a dial failure (a handle_response route's reverse_proxy, an
// lb_retry_match retry) is an unknown outcome, never a released key, and
// a retry after it acted and died is cut. The upstreams run once.
func TestCaddyFastCGIDialFailureAfterAnUpstreamActedKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	retry := "\t\tlb_policy first\n\t\tlb_retries 1\n\t\tlb_retry_match {\n\t\t\tmethod POST\n\t\t}\n"
	transport := "\t\ttransport fastcgi {\n\t\t\troot /srv\n\t\t}\n"
	for i, tc := range []struct {
		name  string
		proxy func(t *testing.T, execs *atomic.Int64, dead int) string
	}{
		{
			name: "handle_response reverse_proxy that cannot dial",
			proxy: func(t *testing.T, execs *atomic.Int64, dead int) string {
				up := fastCGIUpstream(t, execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
					w.Header().Set("X-Accel-Redirect", "/receipt")
					w.WriteHeader(http.StatusCreated)
				})
				return fmt.Sprintf("reverse_proxy %s {\n%s\t\t@accel header X-Accel-Redirect *\n\t\thandle_response @accel {\n\t\t\treverse_proxy 127.0.0.1:%d\n\t\t}\n\t}", up, transport, dead)
			},
		},
		{
			name: "lb_retry_match onto an upstream that cannot dial",
			proxy: func(t *testing.T, execs *atomic.Int64, dead int) string {
				return fmt.Sprintf("reverse_proxy %s 127.0.0.1:%d {\n%s%s\t}", dyingFastCGIUpstream(t, execs), dead, retry, transport)
			},
		},
		{
			name: "lb_retry_match onto an upstream that answers",
			proxy: func(t *testing.T, execs *atomic.Int64, _ int) string {
				answers := fastCGIUpstream(t, execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
					w.WriteHeader(http.StatusCreated)
				})
				return fmt.Sprintf("reverse_proxy %s %s {\n%s%s\t}", dyingFastCGIUpstream(t, execs), answers, retry, transport)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var execs atomic.Int64
			dead := valkeytest.FreePort(t) // nothing listens there
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s"),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-fcgi-%d:", vk.Addr(), i),
				After:       tc.proxy(t, &execs, dead),
			})
			first := post(t, c.URL, "alice", "k", `{"amount":1}`)
			again := post(t, c.URL, "alice", "k", `{"amount":1}`)
			checkRanOnceThenRefused(t, c, execs.Load(), first, again)
		})
	}
}

// TestCaddyHandleResponseReverseProxyAfterAnAnswer: a send that follows a
// response (a handle_response route's own reverse_proxy, the
// X-Accel-Redirect pattern) is not a second send of the request, whatever
// the transport of the first (HTTP, FastCGI): it goes through, its answer
// is stored, and a retry is replayed it without reaching either upstream
// again.
func TestCaddyHandleResponseReverseProxyAfterAnAnswer(t *testing.T) {
	vk := valkeytest.Start(t)
	accel := func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.Header().Set("X-Accel-Redirect", "/receipt")
		w.WriteHeader(http.StatusCreated)
	}
	for i, tc := range []struct {
		name  string
		first func(t *testing.T, execs *atomic.Int64) (addr, transport string)
	}{
		{"http", func(t *testing.T, execs *atomic.Int64) (string, string) {
			return http1Upstream(t, execs, accel), ""
		}},
		{"fastcgi", func(t *testing.T, execs *atomic.Int64) (string, string) {
			return fastCGIUpstream(t, execs, accel), "\t\ttransport fastcgi {\n\t\t\troot /srv\n\t\t}\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var firsts, receipts atomic.Int64
			first, transport := tc.first(t, &firsts)
			receipt := http1Upstream(t, &receipts, func(w http.ResponseWriter, _ *http.Request, n int64) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "receipt %d", n)
			})
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s"),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-accel-%d:", vk.Addr(), i),
				After: fmt.Sprintf("reverse_proxy %s {\n%s\t\t@accel header X-Accel-Redirect *\n\t\thandle_response @accel {\n\t\t\treverse_proxy %s\n\t\t}\n\t}",
					first, transport, receipt),
			})
			// Without a body: reverse_proxy would send the first upstream's
			// read body again, of its length and empty.
			a := post(t, c.URL, "alice", "k", "")
			again := post(t, c.URL, "alice", "k", "")
			if a.Status != http.StatusCreated || a.Body != "receipt 1" || !again.replayed() || again.Body != a.Body {
				t.Fatalf("first: %d %q; retry: %d %q (replayed %v); want the receipt, then its replay\n%s", a.Status, a.Body, again.Status, again.Body, again.replayed(), c.out.String())
			}
			if firsts.Load() != 1 || receipts.Load() != 1 {
				t.Fatalf("upstreams executed %d and %d times, want 1 each", firsts.Load(), receipts.Load())
			}
		})
	}
}
