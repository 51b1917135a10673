package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
)

// h2cClient speaks HTTP/2 with prior knowledge over plain TCP only (what
// curl --http2-prior-knowledge does): no HTTP/1.1, no TLS.
func h2cClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &protos, DisableCompression: true}, Timeout: 10 * time.Second}
}

// rawAnswer is rawExchange as an Answer, failing the test when no complete
// HTTP/1 response arrives within 5 s (an exchange that hangs fails rather
// than waits).
func rawAnswer(t *testing.T, addr, req string) Answer {
	t.Helper()
	resp, body, err := rawExchange(addr, req, 5*time.Second)
	if err != nil {
		t.Fatalf("%q: no answer: %v", strings.SplitN(req, "\r\n", 2)[0], err)
	}
	if resp.Close {
		// ReadResponse moves Connection: close out of the header.
		resp.Header.Set("Connection", "close")
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// TestSecurityH2CPrefaceAndAsteriskNeverReachUpstream: with server.h2c off (the
// default), the HTTP/2 prior-knowledge preface on the plain listener gets an
// answer at once (a GOAWAY, TestGRPCWithoutH2CSaysWhy), another PRI
// request 505 http2-preface over HTTP/1.1, and an HTTP/2 prior-knowledge
// client fails at once instead of waiting; a request target
// in asterisk form other than OPTIONS * is refused with 400
// asterisk-target; OPTIONS * is answered by idemgate itself. The upstream
// executes none of them. Before, the preface was forwarded upstream as
// "PRI /*" and ran its handler, and so was "POST *".
func TestSecurityH2CPrefaceAndAsteriskNeverReachUpstream(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL})

	pri := rawAnswer(t, g.addr(), "PRI * HTTP/1.1\r\nHost: x\r\n\r\n")
	if !pri.isProblem(http.StatusHTTPVersionNotSupported, "http2-preface") {
		t.Errorf("PRI * over HTTP/1.1: %v, want 505 http2-preface", pri)
	} else if pri.Header.Get("Connection") != "close" {
		t.Errorf("PRI * over HTTP/1.1: Connection %q, want close", pri.Header.Get("Connection"))
	}
	if pri := rawAnswer(t, g.addr(), "PRI /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: pri-1\r\nContent-Length: 0\r\n\r\n"); !pri.isProblem(http.StatusHTTPVersionNotSupported, "http2-preface") {
		t.Errorf("PRI on a path: %v, want 505 http2-preface", pri)
	}

	start := time.Now()
	resp, err := h2cClient().Post(g.URL+"/v1/orders", "application/json", strings.NewReader(`{"n":1}`))
	if err == nil {
		resp.Body.Close()
		t.Errorf("HTTP/2 prior knowledge with h2c off: %s, want a refused connection", resp.Status)
	} else if took := time.Since(start); took > 3*time.Second {
		t.Errorf("HTTP/2 prior knowledge with h2c off: refused after %v (%v), want at once", took, err)
	}

	for _, req := range []string{
		"POST * HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: star-1\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"n\":1}",
		"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
		"DELETE * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		if a := rawAnswer(t, g.addr(), req); !a.isProblem(http.StatusBadRequest, "asterisk-target") {
			t.Errorf("%q: %v, want 400 asterisk-target", strings.SplitN(req, "\r\n", 2)[0], a)
		}
	}
	// OPTIONS * asks about the server itself (RFC 9110 section 9.3.7): the
	// server answering it is idemgate, not the upstream.
	if a := rawAnswer(t, g.addr(), "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"); a.Status != http.StatusOK || len(a.Body) != 0 {
		t.Errorf("OPTIONS *: %v, want 200 with no body", a)
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests, want 0", n)
	}
	stillServing(t, g, "preface-and-asterisk")
}

// TestH2CPriorKnowledgeServed: with server.h2c on (the --h2c flag), an
// HTTP/2 prior-knowledge client on the plain listener is served: a keyed
// POST is forwarded once and its retry replayed over HTTP/2; HTTP/1.1 keeps
// working on the same listener and replays the same record; a raw preface
// is answered with HTTP/2 SETTINGS; OPTIONS * over HTTP/2 never reaches the
// upstream; and a keyed request with HTTP/2
// trailers is refused like an HTTP/1.1 one. Before, server.h2c did not
// exist and the preface went upstream.
func TestH2CPriorKnowledgeServed(t *testing.T) {
	up := startUpstream(t)
	g := startGateArgs(t, gateConfig{Upstream: up.URL}, nil, "--wait-store", "10s", "--h2c")
	h2 := h2cClient()

	first, resp := send(t, h2, g.URL+"/v1/orders", "h2c-1", `{"n":1}`)
	if resp.ProtoMajor != 2 || first.Status != http.StatusCreated || first.replayed() {
		t.Fatalf("first over h2c: %s %v", resp.Proto, first)
	}
	again, resp := send(t, h2, g.URL+"/v1/orders", "h2c-1", `{"n":1}`)
	if resp.ProtoMajor != 2 || again.Status != http.StatusCreated || !again.replayed() || string(again.Body) != string(first.Body) {
		t.Fatalf("retry over h2c: %s %v, want the replay of %v", resp.Proto, again, first)
	}
	h1, resp := send(t, rawClient, g.URL+"/v1/orders", "h2c-1", `{"n":1}`)
	if resp.ProtoMajor != 1 || !h1.replayed() || string(h1.Body) != string(first.Body) {
		t.Fatalf("retry over HTTP/1.1: %s %v, want the replay of %v", resp.Proto, h1, first)
	}
	if n := up.Calls("alice", "h2c-1"); n != 1 {
		t.Fatalf("the upstream executed the operation %d times, want 1", n)
	}

	req, err := http.NewRequest(http.MethodOptions, g.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = "*" // the asterisk form; :path "*" over HTTP/2
	resp, err = h2.Do(req)
	if err != nil {
		t.Fatalf("OPTIONS * over h2c: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("OPTIONS * over h2c: %s, want 200", resp.Status)
	}

	// The raw preface is now HTTP/2: the server's first frame is its
	// SETTINGS (RFC 9113 section 3.4), and nothing goes upstream.
	c, err := net.DialTimeout("tcp", g.addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var frame [9]byte
	_, err = io.ReadFull(c, frame[:])
	c.Close()
	if err != nil || frame[3] != 0x4 {
		t.Errorf("after the preface with h2c on: frame header %x, %v; want a SETTINGS frame (type 4)", frame, err)
	}

	// HTTP/2 request trailers: the same refusal as over HTTP/1.1.
	body := strings.NewReader(`{"n":2}`)
	req, err = http.NewRequest(http.MethodPost, g.URL+"/v1/orders", io.NopCloser(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", "h2c-tr")
	req.Trailer = http.Header{"X-Signature": {"a"}}
	resp, err = h2.Do(req)
	if err != nil {
		t.Fatalf("POST with trailers over h2c: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if a := (Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}); !a.isProblem(http.StatusBadRequest, "request-trailers") {
		t.Errorf("POST with trailers over h2c: %v, want 400 request-trailers", a)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream executed %d requests, want 1", n)
	}
}

// chunkedPost is a keyed, chunked POST of {"n":1} with the given lines
// after the header (e.g. "Trailer: X-Signature") and trailer section.
func chunkedPost(key, header, trailer string) string {
	return "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: " + key +
		"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + header +
		"\r\n7\r\n{\"n\":1}\r\n0\r\n" + trailer + "\r\n"
}

// TestSecurityRequestTrailersRefusedOnKeyedRequests: request trailers are not in
// the fingerprint, so a keyed request that carries them (announced in a
// Trailer field or not) is refused with 400 request-trailers and never
// forwarded: the same key with another trailer value can then be neither
// executed twice nor answered with the other request's response. Before,
// the second request (another X-Signature) got the first one's response,
// replayed. A keyed chunked POST without trailers, and a request without a
// key (not enforced) with trailers, are served as before.
func TestSecurityRequestTrailersRefusedOnKeyedRequests(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL})
	for _, c := range []struct{ name, key, header, first, second string }{
		{"announced", "tr-1", "Trailer: X-Signature\r\n", "X-Signature: a\r\n", "X-Signature: b\r\n"},
		{"unannounced", "tr-2", "", "X-Signature: a\r\n", "X-Signature: b\r\n"},
		{"announced, none sent", "tr-3", "Trailer: X-Signature\r\n", "", ""},
	} {
		key := c.key
		a := rawAnswer(t, g.addr(), chunkedPost(key, c.header, c.first))
		b := rawAnswer(t, g.addr(), chunkedPost(key, c.header, c.second))
		if b.replayed() {
			t.Errorf("%s: the request with the second trailer value got a replay: %v", c.name, b)
		}
		for i, x := range []Answer{a, b} {
			if !x.isProblem(http.StatusBadRequest, "request-trailers") {
				t.Errorf("%s: request %d: %v, want 400 request-trailers", c.name, i+1, x)
			}
		}
		if n := up.Calls("alice", key); n != 0 {
			t.Errorf("%s: the upstream executed %d times, want 0", c.name, n)
		}
	}
	if a := rawAnswer(t, g.addr(), chunkedPost("tr-none", "", "")); a.Status != http.StatusCreated {
		t.Errorf("chunked keyed POST without trailers: %v, want 201", a)
	}
	keyless := strings.Replace(chunkedPost("", "", "X-Signature: a\r\n"), "Idempotency-Key: \r\n", "", 1)
	if a := rawAnswer(t, g.addr(), keyless); a.Status != http.StatusCreated {
		t.Errorf("chunked POST without a key, with trailers: %v, want 201 (not enforced)", a)
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("the upstream executed %d requests, want 2", n)
	}
}

// TestListenPortZeroStartLineNamesPorts: --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0
// starts, each on a free port of its own, and the start line names the
// ports bound, so a supervisor or a test can use them. Before, validation
// refused the pair as one address.
func TestListenPortZeroStartLineNamesPorts(t *testing.T) {
	up := startUpstream(t)
	cmd := exec.Command(binary, "serve", "--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting idemgate: %v", err)
	}
	// One reader keeps every line and hands over the start line once; it
	// ends when the process does (its stderr closes).
	type startLine struct {
		Msg   string `json:"msg"`
		Addr  string `json:"addr"`
		Admin string `json:"admin"`
	}
	logs := &syncbuf.Buffer{}
	started := make(chan startLine, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		for sent := false; sc.Scan(); {
			fmt.Fprintln(logs, sc.Text())
			var l startLine
			if !sent && json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "idemgate listening" {
				started <- l
				sent = true
			}
		}
	}()
	exited := make(chan struct{})
	go func() {
		<-read // Wait closes the pipe: read it to its end first
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("idemgate logs:\n%s", logs.String())
		}
	})
	var start startLine
	select {
	case start = <-started:
	case <-exited:
		t.Fatalf("idemgate exited before listening")
	case <-time.After(20 * time.Second):
		t.Fatalf("no start line within 20s")
	}
	for name, addr := range map[string]string{"addr": start.Addr, "admin": start.Admin} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "0" || port == "" {
			t.Fatalf("start line %s=%q, want 127.0.0.1 and the port bound", name, addr)
		}
	}
	if start.Addr == start.Admin {
		t.Fatalf("both listeners on %s", start.Addr)
	}
	resp, err := http.Get("http://" + start.Admin + "/healthz")
	if err != nil {
		t.Fatalf("admin at %s: %v", start.Admin, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /healthz: %s", resp.Status)
	}
	// The built-in defaults: owner: authorization.
	keyed := func() Answer {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+start.Addr+"/v1/orders", strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", "zero-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("proxy at %s: %v", start.Addr, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
	}
	first, again := keyed(), keyed()
	if first.Status != http.StatusCreated || again.Status != http.StatusCreated || !again.replayed() {
		t.Fatalf("proxy at %s: %v then %v, want 201 and its replay", start.Addr, first, again)
	}
	if n := up.Calls("alice", "zero-1"); n != 1 {
		t.Fatalf("the upstream executed %d times, want 1", n)
	}
}
