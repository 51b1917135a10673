package proxy_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dialWrite opens a connection to addr with a 5 s deadline and writes
// data on it as is; the caller closes it.
func dialWrite(t *testing.T, addr, data string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, data); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// rawAnswer writes req as is on a new connection to addr and reads one
// response.
func rawAnswer(t *testing.T, addr, req string) result {
	t.Helper()
	c := dialWrite(t, addr, req)
	defer c.Close()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: no answer: %v", strings.SplitN(req, "\r\n", 2)[0], err)
	}
	defer resp.Body.Close()
	if resp.Close {
		// ReadResponse moves Connection: close out of the header.
		resp.Header.Set("Connection", "close")
	}
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

// TestPrefaceAndAsteriskFormNeverForwarded: the HTTP/2 client preface on
// a listener without h2c is answered in HTTP/2, the server's SETTINGS and
// a GOAWAY (HTTP_1_1_REQUIRED) whose debug data names server.h2c, which a
// client like grpc-go shows (an HTTP/1.1 answer read as a frame was
// "frame too large"); another request with method PRI gets 505
// http2-preface with Connection: close; a target in asterisk form with any
// method but OPTIONS 400 asterisk-target, keyed or not. The upstream gets
// none of them, where it used to get "PRI /*" and "POST /*".
func TestPrefaceAndAsteriskFormNeverForwarded(t *testing.T) {
	h := newHarness(t, created)
	addr := h.front.Listener.Addr().String()
	code, debug := prefaceGoAway(t, addr)
	if code != 0xd || !strings.Contains(debug, "enable server.h2c") {
		t.Errorf("HTTP/2 preface: GOAWAY code %#x debug %q, want HTTP_1_1_REQUIRED (0xd) naming server.h2c", code, debug)
	}
	pri := rawAnswer(t, addr, "PRI * HTTP/1.1\r\nHost: x\r\n\r\n")
	if pri.status != http.StatusHTTPVersionNotSupported || problemType(t, pri) != "http2-preface" || pri.header.Get("Connection") != "close" {
		t.Errorf("PRI over HTTP/1.1: %d %v %s", pri.status, pri.header, pri.body)
	}
	if !strings.Contains(pri.body, "server.h2c") {
		t.Errorf("PRI over HTTP/1.1: the detail does not name server.h2c: %s", pri.body)
	}
	for _, req := range []string{
		"POST * HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: k1\r\nContent-Length: 2\r\n\r\n{}",
		"POST * HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		a := rawAnswer(t, addr, req)
		if a.status != http.StatusBadRequest || problemType(t, a) != "asterisk-target" {
			t.Errorf("%q: %d %s, want 400 asterisk-target", strings.SplitN(req, "\r\n", 2)[0], a.status, a.body)
		}
	}
	if a := rawAnswer(t, addr, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"); a.status != http.StatusOK {
		t.Errorf("OPTIONS *: %d %s, want 200", a.status, a.body)
	}
	h.up.mu.Lock()
	defer h.up.mu.Unlock()
	for path, n := range h.up.hits {
		t.Errorf("the upstream got %d requests for %q", n, path)
	}
}

// prefaceGoAway sends the HTTP/2 client connection preface and an empty
// SETTINGS frame to addr, as an HTTP/2 client with prior knowledge does,
// and returns the error code and debug data of the GOAWAY that follows
// the server's SETTINGS.
func prefaceGoAway(t *testing.T, addr string) (uint32, string) {
	t.Helper()
	c := dialWrite(t, addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	defer c.Close()
	r := bufio.NewReader(c)
	for i := 0; ; i++ {
		var head [9]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			t.Fatalf("HTTP/2 preface: frame %d: %v", i, err)
		}
		payload := make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			t.Fatalf("HTTP/2 preface: frame %d (%q) payload: %v", i, head, err)
		}
		switch {
		case i == 0 && head[3] != 0x4:
			t.Fatalf("HTTP/2 preface: first frame %x, want the server's SETTINGS", head)
		case head[3] == 0x7 && len(payload) >= 8:
			return binary.BigEndian.Uint32(payload[4:8]), string(payload[8:])
		}
	}
}

// TestRequestTrailersRefusedWithKey: a keyed request with trailers, sent
// with or without a Trailer field, is refused with 400 request-trailers and
// never forwarded, so another trailer value under the same key can be
// neither run nor answered with the first request's response; without a
// key it passes through.
func TestRequestTrailersRefusedWithKey(t *testing.T) {
	h := newHarness(t, created)
	addr := h.front.Listener.Addr().String()
	post := func(key, header, trailer string) string {
		return "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\n" + key +
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + header +
			"\r\n2\r\n{}\r\n0\r\n" + trailer + "\r\n"
	}
	for _, c := range []struct{ name, header, trailer string }{
		{"announced a", "Trailer: X-Sig\r\n", "X-Sig: a\r\n"},
		{"announced b", "Trailer: X-Sig\r\n", "X-Sig: b\r\n"},
		{"unannounced", "", "X-Sig: c\r\n"},
		{"announced, not sent", "Trailer: X-Sig\r\n", ""},
	} {
		a := rawAnswer(t, addr, post("Idempotency-Key: k1\r\n", c.header, c.trailer))
		if a.status != http.StatusBadRequest || problemType(t, a) != "request-trailers" || !strings.Contains(a.body, "X-Sig") {
			t.Errorf("%s: %d %s, want 400 request-trailers naming X-Sig", c.name, a.status, a.body)
		}
	}
	if n := h.up.count("/v1/orders"); n != 0 {
		t.Fatalf("the upstream got %d keyed requests with trailers", n)
	}
	if a := rawAnswer(t, addr, post("Idempotency-Key: k2\r\n", "", "")); a.status != http.StatusCreated {
		t.Errorf("keyed chunked POST without trailers: %d %s", a.status, a.body)
	}
	if a := rawAnswer(t, addr, post("", "Trailer: X-Sig\r\n", "X-Sig: a\r\n")); a.status != http.StatusCreated {
		t.Errorf("POST without a key, with trailers: %d %s, want 201 (not enforced)", a.status, a.body)
	}
	if n := h.up.count("/v1/orders"); n != 2 {
		t.Fatalf("the upstream got %d requests, want 2", n)
	}
}
