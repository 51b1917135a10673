// Package grpcwebtest is a gRPC-Web upstream for the tests of gRPC-Web
// calls in every shape (the proxy, the middleware, Caddy): an HTTP handler
// that writes gRPC-Web frames, no gRPC library involved.
package grpcwebtest

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Frame is one gRPC-Web frame: its flag (0 a message, 0x80 the
// trailers), a 4-byte big-endian length and the payload.
func Frame(flag byte, payload string) string {
	n := len(payload)
	return string([]byte{flag, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) + payload
}

// Flaky answers every call with HTTP 200, application/grpc-web+proto and
// a message frame; its trailer frame says grpc-status 14 (UNAVAILABLE, a
// transient code) to the first call of each Idempotency-Key and 0 (OK)
// to the others. It counts the calls per key. Safe for concurrent use.
type Flaky struct {
	mu   sync.Mutex
	runs map[string]int
}

// ServeHTTP reads the call and answers it.
func (f *Flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	if f.runs == nil {
		f.runs = map[string]int{}
	}
	f.runs[key]++
	n := f.runs[key]
	f.mu.Unlock()
	status := "grpc-status: 0\r\n"
	if n == 1 {
		status = "grpc-status: 14\r\ngrpc-message: failover\r\n"
	}
	w.Header().Set("Content-Type", "application/grpc-web+proto")
	_, _ = io.WriteString(w, Frame(0, "order")+Frame(0x80, status))
}

// Runs returns how many calls with key f answered.
func (f *Flaky) Runs(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[key]
}

// Call posts a gRPC-Web call (application/grpc-web+proto, one message
// frame carrying msg) to url as X-User alice with Idempotency-Key key,
// reads the whole answer and returns it with its body closed.
func Call(c *http.Client, url, key, msg string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(Frame(0, msg)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// CheckRelease makes the calls every shape's gRPC-Web test asserts on
// against url (the full method URL) served by h: three calls with one key
// are 200s, only the third replayed, and h ran twice (the UNAVAILABLE
// released the key, the OK was stored); the key reused with another
// message is grpc-status 9 in the headers of an HTTP 200. ran names what
// h stands for ("the handler", "the upstream") in failures.
func CheckRelease(t testing.TB, url string, h *Flaky, ran string) {
	t.Helper()
	call := func(key, msg string) *http.Response {
		resp, err := Call(http.DefaultClient, url, key, msg)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 3 {
		resp := call("w1", "a")
		if resp.StatusCode != http.StatusOK || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 2) {
			t.Fatalf("call %d: %d, replayed %q", i+1, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	}
	if n := h.Runs("w1"); n != 2 {
		t.Fatalf("%s ran %d times, want 2 (UNAVAILABLE, then OK, then its replay)", ran, n)
	}
	if resp := call("w1", "b"); resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "9" {
		t.Fatalf("key reused: %d grpc-status %q, want 200 and 9", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
}
