package gatetest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// Keyed is the fields of a keyed call as the tests send it: the owner in
// X-User and the key in Idempotency-Key, each left out when "".
func Keyed(owner, key string) http.Header {
	h := http.Header{}
	if owner != "" {
		h.Set("X-User", owner)
	}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return h
}

// Post sends POST url with the JSON body and the fields of h through c
// (http.DefaultClient when nil), with Host host when not "", and reads
// the whole answer. The response's body is closed; its bytes are
// returned. An error is the request's, the exchange's or the read's.
func Post(ctx context.Context, c *http.Client, url, host string, h http.Header, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/json")
	for name, vs := range h {
		req.Header[name] = vs
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// DeleteAs sends DELETE url as owner (X-User; left out when "") with a
// 10 s bound, closes the answer and returns its status; it fails t when
// the exchange fails.
func DeleteAs(t testing.TB, url, owner string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if owner != "" {
		req.Header.Set("X-User", owner)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("DELETE %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ProblemType returns the type of the RFC 9457 problem document body,
// without idemgate's problem.Base ("store-unavailable" for idemgate's
// own types), or "" when body is not a problem document.
func ProblemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return strings.TrimPrefix(p.Type, problem.Base)
}

// Counted handles a POST that a CountingUpstream counted: n is its number,
// 1 for the first.
type Counted func(w http.ResponseWriter, r *http.Request, n int64)

// CountingUpstream starts an upstream on a loopback port, stopped in
// t.Cleanup, that counts each POST in execs and hands it, with its
// number, to handle, and answers any other method 200 uncounted: a readiness
// probe, or a request that leaves a keep-alive connection idle for the
// next one. The request body is read before either, and handed on.
func CountingUpstream(t testing.TB, execs *atomic.Int64, handle Counted) *httptest.Server {
	t.Helper()
	return CountingUpstreamOn(t, nil, execs, handle)
}

// CutShortAnswers returns raw HTTP/1.1 answers, by name, whose 201 comes
// whole and whose body ends early, the connection then closing: before
// its Content-Length ("content-length"), or before the last chunk
// ("chunked"). A proxy has written the 201 when its copy of the body
// fails: not an outcome (the binary's TestFaultUpstreamAmbiguousFailure).
func CutShortAnswers() map[string]string {
	return map[string]string{
		"content-length": "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"order\":",
		"chunked":        "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"order\":\r\n",
	}
}

// CutShortUpstream is a CountingUpstream that acts on each POST (counted
// in execs) and answers it with answer, raw, then closes the connection
// (CutShortAnswers).
func CutShortUpstream(t testing.TB, execs *atomic.Int64, answer string) *httptest.Server {
	t.Helper()
	return CountingUpstream(t, execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString(answer)
		_ = buf.Flush()
		_ = conn.Close()
	})
}

// CountingUpstreamOn is CountingUpstream on ln (a port reserved
// earlier), or on a new loopback port when ln is nil.
func CountingUpstreamOn(t testing.TB, ln net.Listener, execs *atomic.Int64, handle Counted) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusOK)
			return
		}
		handle(w, r, execs.Add(1))
	}))
	if ln != nil {
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// HangUp ends an upstream call that acted without an answer: its
// connection is closed cleanly, and the caller cannot know whether it
// acted.
func HangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// Die ends an upstream call that acted without an answer, resetting its
// connection as a process that died mid-call.
func Die(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // RST
		}
		conn.Close()
	}
}

// Serves returns a condition for Until and Eventually: a GET of url is
// answered with status, or with any status when status is 0. A server
// that is starting, or a route that is not back yet, is waited for this
// way.
func Serves(url string, status int) func() bool {
	return func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return status == 0 || resp.StatusCode == status
	}
}
