// Package h1only is a test upstream that speaks HTTP/1.1 only, for the
// tests of h2c upstreams that answer in another protocol: it answers
// whatever arrives with "HTTP/1.1 400 Bad Request" and never runs a
// request.
package h1only

import (
	"io"
	"net"
	"testing"
	"time"
)

// Start listens on a free loopback port and returns its address; the
// listener and every connection are closed in t.Cleanup.
//
// Each connection is answered once and then drained until the client
// closes it: a server that closed at once with the rest of the HTTP/2
// preface unread would reset the connection, and the reset may reach
// the client before the 400 does, which then cannot tell this server
// from an HTTP/2 one that went silent (net/http's HTTP/1.1 server does
// that, so a test on it flaked).
func Start(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("h1only: listen: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		l.Close()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c, done)
		}
	}()
	return l.Addr().String()
}

func serve(c net.Conn, done <-chan struct{}) {
	defer c.Close()
	go func() {
		<-done
		c.Close()
	}()
	buf := make([]byte, 4096)
	if _, err := c.Read(buf); err != nil {
		return
	}
	_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nBad Request")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.Copy(io.Discard, c)
}
