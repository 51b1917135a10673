package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/earlyanswer"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
)

// TestPassthroughBodiesArriveWhole pins that a passthrough body reaches the
// upstream byte for byte with its declared length, whether idemgate reads it
// first (small) or streams it (over 16 KiB, or of unknown length).
func TestPassthroughBodiesArriveWhole(t *testing.T) {
	type seen struct {
		body   string
		length int64
		te     []string
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.ContentLength, r.TransferEncoding}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	front := newFront(t, up.URL)
	send := func(t *testing.T, body io.Reader, length int64) seen {
		t.Helper()
		req, _ := http.NewRequest("POST", front+"/v1/orders", body)
		req.ContentLength = length
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return <-got
	}
	for name, size := range map[string]int{"small": 1 << 10, "at the limit": 16 << 10, "large": 16<<10 + 1, "very large": 1 << 20} {
		t.Run(name, func(t *testing.T) {
			body := strings.Repeat("x", size)
			s := send(t, strings.NewReader(body), int64(size))
			if s.body != body || s.length != int64(size) || len(s.te) != 0 {
				t.Fatalf("upstream got %d bytes, Content-Length %d, Transfer-Encoding %q; want %d bytes with that length",
					len(s.body), s.length, s.te, size)
			}
		})
	}
	t.Run("unknown length", func(t *testing.T) {
		body := strings.Repeat("y", 3000)
		s := send(t, io.MultiReader(strings.NewReader(body)), -1)
		if s.body != body {
			t.Fatalf("upstream got %d bytes, want %d", len(s.body), len(body))
		}
	})
}

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// newFront starts idemgate with baseRoute in front of upstream; transport,
// when given, replaces its upstream transport.
func newFront(t *testing.T, upstream string, transport ...http.RoundTripper) string {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	pol, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(upstream)
	o := proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, Policy: func() *policy.Policy { return pol }}
	if len(transport) > 0 {
		o.Transport = transport[0]
	}
	p, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return front.URL
}

// TestPassthroughStreamedBodyAnswerArrivesWhole pins that a streamed
// passthrough body (over 16 KiB) whose upstream answers as soon as it has
// read it gets its whole answer, in the order that a loaded machine
// produces now and then (earlyanswer.Check): without full duplex the
// transport's connection was closed under the answer, and the client got
// 201 and part of the body.
func TestPassthroughStreamedBodyAnswerArrivesWhole(t *testing.T) {
	earlyanswer.Check(t, func(upstream string, transport http.RoundTripper) string {
		return newFront(t, upstream, transport)
	}, proxy.NewTransport(5*time.Second), "/v1/orders", http.Header{"X-User": {"alice"}})
}

// TestPassthroughSmallBodyLeavesWithItsHeader pins why small passthrough
// bodies are read first: idemgate writes the request line, the header and
// the body to the upstream connection in one write, not the header alone
// first (net/http's transport flushes the header before a body it cannot
// tell is in memory): one write(2) and one TCP segment less per request.
func TestPassthroughSmallBodyLeavesWithItsHeader(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	var writes atomic.Int64
	front := newFront(t, up.URL, countingTransport(t, &writes))
	for _, size := range []int{1, 1 << 10, 16 << 10} {
		writes.Store(0)
		req, _ := http.NewRequest("POST", front+"/v1/orders", strings.NewReader(strings.Repeat("z", size)))
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// A body larger than the transport's 4 KiB write buffer takes
		// more writes, but the header never goes alone.
		if n, want := writes.Load(), int64(1+size/(4<<10)); n > want {
			t.Fatalf("a %d-byte passthrough request took %d writes to the upstream, want at most %d (the header not flushed alone)", size, n, want)
		}
	}
}

// countingTransport is proxy.NewTransport counting in writes the writes
// made on its connections.
func countingTransport(t *testing.T, writes *atomic.Int64) *http.Transport {
	tr := proxy.NewTransport(5 * time.Second)
	dialer := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// TestKeyedRequestLeavesWithItsHeader is
// TestPassthroughSmallBodyLeavesWithItsHeader for an enforced request:
// its body, read whole for the fingerprint, goes upstream in the write
// of its header, not after it (one write(2) and one TCP segment less per
// fresh key, and one read less for the upstream). The retry is still
// replayed, not sent again.
func TestKeyedRequestLeavesWithItsHeader(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	var writes atomic.Int64
	front := newFront(t, up.URL, countingTransport(t, &writes))
	for i, size := range []int{0, 1, 1 << 10} {
		writes.Store(0)
		key := fmt.Sprintf(`"k%d"`, i)
		for try := range 2 {
			req, _ := http.NewRequest("POST", front+"/v1/orders", strings.NewReader(strings.Repeat("z", size)))
			req.Header.Set("X-User", "alice")
			req.Header.Set("Idempotency-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || (try == 1) != (resp.Header.Get(proxy.ReplayedHeader) == "true") {
				t.Fatalf("try %d: status %d, replayed %q", try, resp.StatusCode, resp.Header.Get(proxy.ReplayedHeader))
			}
		}
		if n := writes.Load(); n != 1 {
			t.Errorf("a keyed %d-byte request took %d writes to the upstream, want 1 (the header not flushed alone)", size, n)
		}
		if n := calls.Load(); n != int64(i+1) {
			t.Fatalf("upstream ran %d times for %d keys", n, i+1)
		}
	}
}

// countingReader counts the Read calls made on it.
type countingReader struct {
	r     io.Reader
	reads atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.r.Read(p)
}

// TestPassthroughExpectContinueIsNotReadFirst pins that a passthrough
// request expecting 100 Continue is streamed as before, not read first:
// reading it would make idemgate send 100 Continue, and the client would
// upload a body the upstream refuses without reading.
func TestPassthroughExpectContinueIsNotReadFirst(t *testing.T) {
	// Not the harness's upstream, which reads every body.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(up.Close)
	front := newFront(t, up.URL)
	body := &countingReader{r: strings.NewReader(strings.Repeat("u", 1<<10))}
	req, _ := http.NewRequest("POST", front+"/v1/upload", body)
	req.ContentLength = 1 << 10
	req.Header.Set("Expect", "100-continue")
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Hour}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want the upstream's 403", resp.StatusCode)
	}
	if n := body.reads.Load(); n != 0 {
		t.Fatalf("the client sent its body (%d reads): someone answered 100 Continue", n)
	}
}

// TestPassthroughTruncatedBodyIsNotForwarded pins the answer to a small
// passthrough body that ends before its Content-Length: 400 bad-request
// from idemgate, and nothing reaches the upstream (it used to get the
// header and the partial body).
func TestPassthroughTruncatedBodyIsNotForwarded(t *testing.T) {
	h := newHarness(t, created)
	c, err := net.Dial("tcp", h.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/orders HTTP/1.1\r\nHost: gate\r\nX-User: alice\r\nContent-Length: 100\r\n\r\n%s", bytes.Repeat([]byte("a"), 10))
	_ = c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if n := h.up.count("/v1/orders"); n != 0 {
		t.Fatalf("upstream saw %d requests, want 0", n)
	}
	if logs := h.logText(); !strings.Contains(logs, `"outcome":"bad_request"`) {
		t.Fatalf("access line lacks outcome bad_request:\n%s", logs)
	}
}

// TestPassthroughKnownLengthTrickleIsFlushed is TestStreamingPassthroughIsFlushed
// for a response with a Content-Length: its bytes reach the client while
// the upstream still holds the rest back (at most passthroughFlushInterval
// later), not only when the response ends.
func TestPassthroughKnownLengthTrickleIsFlushed(t *testing.T) {
	step := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "13")
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-step
		io.WriteString(w, "second\n")
	})
	resp, err := http.Get(h.front.URL + "/download")
	if err != nil {
		close(step)
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	close(step)
	if err != nil || line != "first\n" || resp.ContentLength != 13 {
		t.Fatalf("first line = %q, %v (Content-Length %d): not flushed before the response ended", line, err, resp.ContentLength)
	}
}

// TestKeylessPassthroughKeepsTeTrailers: a request passed through because
// it carries no key (its route enforces the method, the key is optional)
// reaches the upstream as a request the route does not enforce does, with
// the "Te: trailers" it sent, which httputil.ReverseProxy forwards and a
// gRPC server checks for: the hop-by-hop fields are removed from the
// upstream's view of an enforced request, not from the request as it came.
func TestKeylessPassthroughKeepsTeTrailers(t *testing.T) {
	te := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te <- r.Header.Get("Te")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)
	front := newFront(t, up.URL)
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, front+"/v1/orders", strings.NewReader("{}"))
		req.Header.Set("X-User", "alice")
		req.Header.Set("Te", "trailers")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := <-te; resp.StatusCode != http.StatusOK || got != "trailers" {
			t.Errorf("%s without a key: status %d, upstream got Te %q, want 200 and %q", method, resp.StatusCode, got, "trailers")
		}
	}
}
