// Package earlyanswer checks that a reverse proxy streaming a request body
// upstream delivers the whole answer when the upstream answers as soon as
// it has the body, before the proxy's transport is done with it.
//
// net/http's HTTP/1 server closes a request body when the response header
// is written, unless the handler enabled full duplex. Its transport reads a
// streamed body once more after the declared length, to check that it is
// not longer; when the answer has started by then, that read fails
// ("invalid Read on closed Body") and the transport closes the connection
// the answer is still arriving on, so the client gets a cut answer
// (golang/go#40747). On a loaded machine that happens to a few large
// answers in a hundred; Check makes the order certain.
package earlyanswer

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Size is the request body Check streams and the answer it expects back,
// in bytes: large enough that neither fits a socket buffer.
const Size = 1 << 20

// Front starts the proxy under test in front of upstream (a base URL),
// sending upstream requests through transport, and returns the proxy's
// base URL; what it starts is stopped in t.Cleanup.
type Front func(upstream string, transport http.RoundTripper) string

// Check streams a Size-byte POST to path through the proxy that front
// starts, with header added, to an upstream that echoes it: it sends half
// its answer once it has read the body and the rest when told. The proxy's
// transport is base with its dialer wrapped: after the body's last write
// it is held until the client has the answer's header. t fails when the
// transport could not write the request whole or the client did not get
// 201 and the whole answer.
func Check(t *testing.T, front Front, base *http.Transport, path string, header http.Header) {
	t.Helper()
	rest := make(chan struct{}) // closed: the upstream sends the rest of its answer
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusCreated)
		half := len(b) / 2
		_, _ = w.Write(b[:half])
		_ = http.NewResponseController(w).Flush()
		select {
		case <-rest:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(b[half:])
	}))
	t.Cleanup(up.Close)

	hc := &holdConn{want: Size, held: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	tr := base.Clone()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		hc.Conn = c
		return hc, nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	wrote := make(chan error, 1)
	traced := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) { wrote <- i.Err },
		})
		return tr.RoundTrip(r.WithContext(ctx))
	})
	proxyURL := front(up.URL, traced)
	release := sync.OnceFunc(func() { close(hc.release) })
	sendRest := sync.OnceFunc(func() { close(rest) })
	t.Cleanup(func() { release(); sendRest() }) // before the servers close: nothing stays held

	req, err := http.NewRequest(http.MethodPost, proxyURL+path, bytes.NewReader(bytes.Repeat([]byte("x"), Size)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The client has the header: the proxy has started its answer.
	select {
	case <-hc.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy's transport never made the body's last write")
	}
	release()
	if err := <-wrote; err != nil {
		t.Errorf("the proxy's transport failed to write the request after the upstream answered: %v", err)
		// It then closes the connection the answer arrives on; let that
		// happen before the rest of the answer can pass.
		select {
		case <-hc.closed:
		case <-time.After(10 * time.Second):
		}
	}
	sendRest()
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated || err != nil || n != Size {
		t.Errorf("client got %d and %d of %d bytes, err %v; want 201 and the whole answer", resp.StatusCode, n, Size, err)
	}
}

// holdConn is the proxy's connection to the upstream: once the request
// body's last byte is written (want bytes after the first write, the
// header, which the transport flushes on its own before a streamed body),
// its Write returns only when release is closed.
type holdConn struct {
	net.Conn
	want          int64
	writes        int
	body          int64
	held, release chan struct{}
	closeOnce     sync.Once
	closed        chan struct{}
}

func (c *holdConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.writes++
	if c.writes > 1 {
		c.body += int64(n)
		if c.body == c.want {
			close(c.held)
			<-c.release
		}
	}
	return n, err
}

func (c *holdConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
