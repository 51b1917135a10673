package proxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/h1only"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// h2cOnly starts a backend that speaks only HTTP/2 without TLS (prior
// knowledge), as a gRPC server in a cluster does.
func h2cOnly(t *testing.T, h http.HandlerFunc) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &p
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// routeTo adds the route "grpc" for /orders.v1.Orders/ with its own
// upstream rawURL.
func routeTo(rawURL string) option {
	return func(_ *proxy.Options, _ *policy.Route, routes *[]policy.Route) {
		u, _ := url.Parse(rawURL)
		r := baseRoute()
		r.Name, r.Match, r.Upstream = "grpc", "/orders.v1.Orders/", u
		*routes = append(*routes, r)
	}
}

// TestH2CUpstream: an h2c:// upstream is spoken to in HTTP/2 with prior
// knowledge, TE: trailers reaches it, and its answer is stored and
// replayed.
func TestH2CUpstream(t *testing.T) {
	var mu sync.Mutex
	var protos, tes []string
	up := h2cOnly(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos, tes = append(protos, r.Proto), append(tes, r.Header.Get("Te"))
		mu.Unlock()
		grpcAnswer("0", false)(w, r)
	})
	h := newHarness(t, created, routeTo("h2c://"+strings.TrimPrefix(up.URL, "http://")))
	r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "{}")
	if r.status != 200 || r.header.Get("Grpc-Status") != "0" {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "{}"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry not replayed: %d %s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(protos) != 1 || protos[0] != "HTTP/2.0" || tes[0] != "trailers" {
		t.Fatalf("upstream saw protos %q, TE %q; want one HTTP/2.0 request with TE: trailers", protos, tes)
	}
}

// TestH2CProtocolMismatchReleasesKey: an h2c:// upstream that speaks
// HTTP/1.1 only never processes the request, so the key is released and
// the answer is upstream-unreachable, not upstream-failed; the retry is
// not refused as in progress.
func TestH2CProtocolMismatchReleasesKey(t *testing.T) {
	h := newHarness(t, created, routeTo("h2c://"+h1only.Start(t)))
	for i := range 2 {
		r := h.do("POST", "/orders.v1.Orders/Create", "alice", "k1", "{}")
		if r.status != 502 || !strings.Contains(r.body, "upstream-unreachable") {
			t.Fatalf("attempt %d: %d %s, want 502 upstream-unreachable", i, r.status, r.body)
		}
	}
}

// doGRPC sends a POST as a gRPC client would: Content-Type
// application/grpc and TE: trailers (over HTTP/1.1 here, which the
// proxy's front accepts).
func doGRPC(t *testing.T, h *harness, path, user, key, body string, extra ...string) result {
	t.Helper()
	req, err := http.NewRequest("POST", h.front.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	if user != "" {
		req.Header.Set("X-User", user)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// Trailers join the header here: a gRPC status is in one or the
	// other (trailers-only), and the tests read it from one place.
	for name, v := range resp.Trailer {
		resp.Header[name] = v
	}
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// silentH2Server accepts connections, reads the HTTP/2 client preface and
// frames, counts every HEADERS frame (a request it could act on), and
// never writes a byte: an HTTP/2 server slow to send its SETTINGS (or
// crashed after reading) when closeAfter is false, one that closes the
// connection after reading the request when it is true.
func silentH2Server(t *testing.T, closeAfter bool) (addr string, requests func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	n := 0
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				if _, err := io.ReadFull(c, make([]byte, 24)); err != nil {
					return
				}
				var head [9]byte
				for {
					if _, err := io.ReadFull(c, head[:]); err != nil {
						return
					}
					length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
					if _, err := io.ReadFull(c, make([]byte, length)); err != nil {
						return
					}
					if head[3] == 0x1 { // HEADERS: a request the server may act on
						mu.Lock()
						n++
						mu.Unlock()
						if closeAfter {
							c.Close()
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestH2CSilentServerKeepsTheClaim: an h2c:// upstream that read the
// request but wrote nothing (slow to send SETTINGS, hung, or closed the
// connection after reading) may have acted, so the key is not released
// as for an HTTP/1.1 server that answered: the retry within the lease is
// refused as in progress and the upstream sees one request. Only an
// answer that is not an HTTP/2 preface proves nothing was processed.
func TestH2CSilentServerKeepsTheClaim(t *testing.T) {
	for _, closeAfter := range []bool{false, true} {
		name := map[bool]string{false: "no SETTINGS before the timeout", true: "closed after reading"}[closeAfter]
		t.Run(name, func(t *testing.T) {
			addr, requests := silentH2Server(t, closeAfter)
			h := newHarness(t, created, routeTo("h2c://"+addr), func(o *proxy.Options, d *policy.Route, routes *[]policy.Route) {
				o.Timeout = 300 * time.Millisecond
				for i := range *routes {
					(*routes)[i].Lease = 5 * time.Second
					(*routes)[i].Concurrent = policy.ConcurrentConflict
				}
			})
			r := h.do("POST", "/orders.v1.Orders/Create", "alice", "k1", "{}")
			if r.status != 502 && r.status != 504 {
				t.Fatalf("first: %d %s, want 502 or 504", r.status, r.body)
			}
			if strings.Contains(r.body, "upstream-unreachable") {
				t.Fatalf("first: %s; the request reached an HTTP/2 server that may have acted, not unreachable", r.body)
			}
			r = h.do("POST", "/orders.v1.Orders/Create", "alice", "k1", "{}")
			if r.status != 409 {
				t.Fatalf("retry: %d %s, want 409 while the claim runs out", r.status, r.body)
			}
			if n := requests(); n != 1 {
				t.Fatalf("the upstream read %d requests, want 1", n)
			}
		})
	}
}
