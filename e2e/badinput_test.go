package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// badInputGate starts idemgate with small limits: 1 KiB request bodies, 1 s
// to send headers, 2 s to send a whole request, 8 KiB of headers, and a /ws
// route that enforces GET too (so an upgrade is the only reason a keyed GET
// there passes through).
func badInputGate(t *testing.T) (*valkeytest.Server, *Upstream, *Gate) {
	t.Helper()
	v := valkeytest.Start(t)
	up := startUpstream(t)
	g := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken,
		Defaults: "  max_request_bytes: 1KiB\n",
		Routes:   "  - name: ws\n    match: \"/ws\"\n    methods: [GET, POST]\n"},
		appendYAML("server:\n  read_header_timeout: 1s\n  read_timeout: 2s\n  max_header_bytes: 8KiB\n"))
	return v, up, g
}

// stillServing checks that the proxy answers a normal request after bad
// input, with a fresh key.
func stillServing(t *testing.T, g *Gate, tag string) {
	t.Helper()
	key := "healthy-" + tag
	if a := postTimeout(10*time.Second, g.URL+"/v1/orders", "alice", key, "{}"); a.Status != 201 {
		t.Fatalf("after %s the proxy no longer serves: %v", tag, a)
	}
}

// noRecord checks that idemgate holds no record for (alice, key) on route.
func noRecord(t *testing.T, g *Gate, route, key string) {
	t.Helper()
	if a := adminDo(t, "GET", recordURL(g, route, "alice", key, ""), adminToken); a.Status != 404 {
		t.Fatalf("record for key %q on route %s: %v, want none (404)", key, route, a)
	}
}

func TestSecurityBadInputKeys(t *testing.T) {
	_, up, g := badInputGate(t)
	cases := []struct {
		name   string
		values []string
	}{
		{"empty", []string{""}},
		{"only whitespace", []string{"   "}},
		{"unterminated sf-string", []string{`"abc`}},
		{"list of two", []string{`"a", "b"`}},
		{"parameters", []string{`"a";p=1`}},
		{"bare with a space", []string{"a b"}},
		{"oversized (256)", []string{strings.Repeat("k", 256)}},
		{"oversized quoted (256)", []string{`"` + strings.Repeat("k", 256) + `"`}},
		{"duplicated field", []string{"a", "a"}},
		{"duplicated, different", []string{"a", "b"}},
		{"non-ASCII", []string{"clé-1"}},
		{"non-ASCII quoted", []string{`"日本"`}},
		{"integer item", []string{"42"}}, // a bare token, valid
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", g.URL+"/v1/orders", strings.NewReader("{}"))
			req.Header.Set("X-User", "alice")
			req.Header["Idempotency-Key"] = tc.values
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a := Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
			if tc.name == "integer item" {
				if a.Status != 201 {
					t.Fatalf("valid bare key: %v", a)
				}
				return
			}
			if !a.isProblem(400, "invalid-key") {
				t.Fatalf("key %q: %v, want 400 invalid-key", tc.values, a)
			}
			if !strings.Contains(string(body), `"detail"`) {
				t.Errorf("problem without a detail: %s", body)
			}
			stillServing(t, g, strconv.Itoa(i))
		})
	}
	if n := up.Total(); n != len(cases) { // one healthy request per invalid key, plus "42"
		t.Fatalf("upstream executed %d requests, want %d: an invalid key reached it", n, len(cases))
	}
	// 255 characters is the limit, not over it.
	if a := mustPost(t, g.URL+"/v1/orders", "alice", strings.Repeat("k", 255), "{}"); a.Status != 201 {
		t.Fatalf("255-character key: %v", a)
	}
}

func TestSecurityBadInputBodies(t *testing.T) {
	_, up, g := badInputGate(t)
	big := strings.Repeat("x", 4096)
	t.Run("declared oversized", func(t *testing.T) {
		a := mustPost(t, g.URL+"/v1/orders", "alice", "big-declared", big)
		if !a.isProblem(413, "request-too-large") {
			t.Fatalf("%v, want 413", a)
		}
	})
	t.Run("chunked oversized fast", func(t *testing.T) {
		req, _ := http.NewRequest("POST", g.URL+"/v1/orders", io.MultiReader(strings.NewReader(big))) // unknown length: chunked
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", "big-chunked")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if a := (Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}); !a.isProblem(413, "request-too-large") {
			t.Fatalf("%v, want 413", a)
		}
	})
	t.Run("chunked oversized slow", func(t *testing.T) {
		c, err := net.Dial("tcp", g.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: big-slow\r\nTransfer-Encoding: chunked\r\n\r\n")
		go func() { // 100 bytes every 40 ms until the proxy stops reading
			for i := 0; i < 40; i++ {
				if _, err := fmt.Fprintf(c, "64\r\n%s\r\n", strings.Repeat("y", 100)); err != nil {
					return
				}
				time.Sleep(40 * time.Millisecond)
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if a := (Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}); !a.isProblem(413, "request-too-large") {
			t.Fatalf("%v, want 413", a)
		}
	})
	t.Run("stalled body", func(t *testing.T) {
		start := time.Now()
		resp, body, err := rawExchange(g.addr(), "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: stalled\r\n"+
			"Content-Length: 100\r\n\r\nonly-part", 10*time.Second)
		took := time.Since(start)
		if took > 6*time.Second {
			t.Fatalf("a stalled body held the connection %v; read_timeout is 2s", took)
		}
		if err == nil {
			if a := (Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}); !a.isProblem(400, "bad-request") {
				t.Fatalf("%v, want 400 bad-request (or the connection closed)", a)
			}
		}
		noRecord(t, g, "default", "stalled")
	})
	t.Run("invalid chunked framing", func(t *testing.T) {
		resp, body, err := rawExchange(g.addr(), "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: badchunk\r\n"+
			"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if a := (Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}); !a.isProblem(400, "bad-request") {
			t.Fatalf("%v, want 400 bad-request", a)
		}
		noRecord(t, g, "default", "badchunk")
	})
	t.Run("Content-Length and Transfer-Encoding", func(t *testing.T) {
		// A front end framing by Content-Length sees one request whose body
		// hides a second; framing by Transfer-Encoding (RFC 9112 section
		// 6.3, which Go's server follows) there are two. idemgate must frame
		// the way the RFC says and send the upstream a request of its own
		// framing, never the raw bytes.
		smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
		body := "0\r\n\r\n" + smuggled
		c, err := net.Dial("tcp", g.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: clte\r\n"+
			"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode == 400:
		case resp.StatusCode == 201 && strings.Contains(string(b), `"request":""`):
			// Transfer-Encoding won: the upstream got an empty body,
			// framed by idemgate's own Content-Length.
		default:
			t.Fatalf("CL+TE: %d %s, want 400 or the chunked (empty) body forwarded", resp.StatusCode, b)
		}
	})
	t.Run("Expect 100-continue rejected", func(t *testing.T) {
		for name, head := range map[string]string{
			"too large":   "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: expect-big\r\nContent-Length: 4096\r\nExpect: 100-continue\r\n\r\n",
			"invalid key": "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: \"bad\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
		} {
			c, err := net.Dial("tcp", g.addr())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, head) // no body: a client waits for 100 Continue
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if strings.Contains(line, "100") || !(strings.Contains(line, "413") || strings.Contains(line, "400")) {
				t.Fatalf("%s: first line %q, want the final 4xx without 100 Continue", name, line)
			}
		}
	})
	t.Run("Expect 100-continue accepted", func(t *testing.T) {
		c, err := net.Dial("tcp", g.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: expect-ok\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("first line %q %v, want 100 Continue", line, err)
		}
		if _, err := br.ReadString('\n'); err != nil { // blank line ending the 1xx
			t.Fatal(err)
		}
		io.WriteString(c, "{}")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("after 100 Continue: %d, want 201", resp.StatusCode)
		}
	})
	// Of the keyed requests only expect-ok and (when not refused) the CL+TE
	// POST may reach the upstream; the GET behind the latter is a request
	// of its own under Transfer-Encoding framing, passed through or not
	// depending on when the test closed the connection.
	for _, key := range []string{"big-declared", "big-chunked", "big-slow", "stalled", "badchunk", "expect-big"} {
		if n := up.Calls("alice", key); n != 0 {
			t.Errorf("rejected request %s reached the upstream %d times", key, n)
		}
	}
	if n := up.Calls("alice", "expect-ok"); n != 1 {
		t.Errorf("expect-ok ran %d times, want 1", n)
	}
	if n := up.Calls("alice", "clte"); n > 1 {
		t.Errorf("the CL+TE request ran %d times", n)
	}
	stillServing(t, g, "bodies")
}

func TestSecurityBadInputHeaders(t *testing.T) {
	_, up, g := badInputGate(t)
	t.Run("oversized headers", func(t *testing.T) {
		resp, _, err := rawExchange(g.addr(), "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: hdr\r\n"+
			"X-Big: "+strings.Repeat("h", 64<<10)+"\r\nContent-Length: 2\r\n\r\n{}", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 431 {
			t.Fatalf("oversized headers: %d, want 431", resp.StatusCode)
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		c, err := net.Dial("tcp", g.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_ = c.SetDeadline(start.Add(10 * time.Second))
		io.WriteString(c, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: al") // and nothing more
		_, err = io.ReadAll(c)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("a client stalling in its headers held the connection %v (err %v); read_header_timeout is 1s", took, err)
		}
	})
	t.Run("many stalled clients", func(t *testing.T) {
		// Slowloris: the proxy serves normal requests while 50 connections
		// sit in their headers.
		var conns []net.Conn
		for i := 0; i < 50; i++ {
			c, err := net.Dial("tcp", g.addr())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			io.WriteString(c, "POST /v1/orders HTTP/1.1\r\n")
		}
		stillServing(t, g, "slowloris")
		for _, c := range conns {
			c.Close()
		}
	})
	if n := up.Total(); n != 1 {
		t.Errorf("upstream executed %d requests, want only the healthy one", n)
	}
}

func TestSecurityBadInputNotEnforced(t *testing.T) {
	_, up, g := badInputGate(t)
	t.Run("HEAD and OPTIONS pass through", func(t *testing.T) {
		for _, m := range []string{"HEAD", "OPTIONS", "HEAD", "OPTIONS"} {
			req, _ := http.NewRequest(m, g.URL+"/v1/orders", nil)
			req.Header.Set("X-User", "alice")
			req.Header.Set("Idempotency-Key", "k-"+m)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("%s: %d replayed=%q, want the upstream's own answer", m, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
			}
		}
		for _, m := range []string{"HEAD", "OPTIONS"} {
			if n := up.Calls("alice", "k-"+m); n != 2 {
				t.Fatalf("%s reached the upstream %d times, want 2 (never claimed nor replayed)", m, n)
			}
			noRecord(t, g, "default", "k-"+m)
		}
	})
	t.Run("WebSocket upgrade passes through", func(t *testing.T) {
		up.Set(echoUpgrade, 0, nil)
		defer up.Set(nil, 0, nil)
		for i := 0; i < 2; i++ {
			c, err := net.Dial("tcp", g.addr())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: ws-1\r\n"+
				"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 101 {
				t.Fatalf("upgrade %d: %d, want 101", i, resp.StatusCode)
			}
			io.WriteString(c, "ping")
			buf := make([]byte, 4)
			if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("upgraded stream: %q %v, want the echo", buf, err)
			}
			c.Close()
		}
		if n := up.Calls("alice", "ws-1"); n != 2 {
			t.Fatalf("upgrades reached the upstream %d times, want 2", n)
		}
		noRecord(t, g, "ws", "ws-1")
	})
	t.Run("Upgrade header on a POST does not bypass enforcement", func(t *testing.T) {
		// Only a GET upgrade is a WebSocket handshake (RFC 6455 section
		// 4.1); an Upgrade field on a POST is just a field.
		for i := 0; i < 2; i++ {
			resp, body, err := rawExchange(g.addr(), "POST /ws HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: ws-post\r\n"+
				"Connection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\n{}", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 201 || (i == 1) != (resp.Header.Get("Idempotent-Replayed") == "true") {
				t.Fatalf("POST with Upgrade %d: %d %s", i, resp.StatusCode, body)
			}
		}
		if n := up.Calls("alice", "ws-post"); n != 1 {
			t.Fatalf("a keyed POST carrying Upgrade ran %d times, want 1", n)
		}
	})
	stillServing(t, g, "not-enforced")
}

// echoUpgrade answers a WebSocket-style upgrade with 101 and echoes bytes;
// other requests get the default 201.
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || r.Method != "GET" {
		w.WriteHeader(201)
		return
	}
	c, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	buf.Flush()
	_, _ = io.Copy(c, buf)
}

// TestSecurityBadInputMemoryBounded floods the proxy with oversized bodies, declared
// and chunked, from 32 clients at once and checks that its resident memory
// does not grow with what was sent (400 MiB): bodies are never buffered
// past the route limit.
func TestSecurityBadInputMemoryBounded(t *testing.T) {
	_, up, g := badInputGate(t)
	rss := func() float64 {
		a := adminDo(t, "GET", g.AdminURL+"/metrics", "")
		m := regexp.MustCompile(`(?m)^process_resident_memory_bytes ([0-9.e+]+)$`).FindSubmatch(a.Body)
		if m == nil {
			t.Fatalf("no process_resident_memory_bytes in /metrics")
		}
		f, _ := strconv.ParseFloat(string(m[1]), 64)
		return f
	}
	stillServing(t, g, "warmup")
	before := rss()
	const clients, each, size = 32, 3, 4 << 20
	chunk := bytes.Repeat([]byte("z"), 64<<10)
	var wg sync.WaitGroup
	var failures sync.Map
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var body io.Reader = &repeatReader{chunk: chunk, left: size}
				req, _ := http.NewRequest("POST", g.URL+"/v1/orders", body)
				if i%2 == 0 {
					req.ContentLength = size
				} // else chunked
				req.Header.Set("X-User", "alice")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("flood-%d-%d", c, i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					// The proxy may close the connection while a large body is
					// still being written: an acceptable answer to a flood.
					if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
						failures.Store(fmt.Sprint(c, i), err)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 413 {
					failures.Store(fmt.Sprint(c, i), resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	failures.Range(func(k, v any) bool {
		t.Errorf("flood request %v: %v, want 413", k, v)
		return true
	})
	after := rss()
	t.Logf("resident memory %.1f MiB before, %.1f MiB after %d MiB of oversized bodies", before/(1<<20), after/(1<<20), clients*each*size>>20)
	if grow := after - before; grow > 64<<20 {
		t.Fatalf("resident memory grew by %.1f MiB", grow/(1<<20))
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("upstream executed %d requests, want only the warm-up", n)
	}
	stillServing(t, g, "flood")
}

// repeatReader yields chunk over and over until left bytes were read.
type repeatReader struct {
	chunk []byte
	left  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunk)
	n = min(n, r.left)
	r.left -= n
	return n, nil
}
