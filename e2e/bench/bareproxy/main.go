// Command bareproxy is the benchmark's baseline: a bare httputil.ReverseProxy with idemgate's transport settings and no idempotency.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback only)")
	upstream := flag.String("upstream", "", "upstream base URL")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		log.Fatalf("bareproxy: --upstream must be an absolute URL: %q", *upstream)
	}
	h := newHandler(u, newTransport())
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, l.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Fatal(srv.Serve(l))
}

// newTransport returns the same transport as proxy.NewTransport, so B and
// C/D differ only by the idempotency work.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	t.MaxIdleConnsPerHost = 256
	t.MaxIdleConns = 0 // as proxy.NewTransport: DefaultTransport's 100 capped the 256
	t.ResponseHeaderTimeout = 60 * time.Second
	return t
}

// newHandler returns the bare ReverseProxy to upstream over transport,
// served full duplex: the request body is streamed upstream while the
// answer streams back, and net/http's HTTP/1 server otherwise closes a
// request body when the response header is written (to drain what the
// handler left unread). The transport reads a body once more after its
// declared length, to check that it is not longer; when the upstream has
// answered before that read (it has all the bytes it needs), the read
// lands on the closed body, fails ("invalid Read on closed Body"), and
// the transport closes the connection the answer is still arriving on:
// the client gets a cut answer and the log "ReverseProxy read error during
// body copy: use of closed network connection" (golang/go#40747). How
// often depends on scheduling: rare idle, a few answers in a hundred on a
// loaded machine for 1 MiB bodies. TestFullBodyAfterEarlyAnswer pins it.
func newHandler(upstream *url.URL, transport http.RoundTripper) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		Transport: transport,
		// As idemgate's passthrough (proxy.passthroughFlushInterval): -1
		// flushed every response's header from a timer goroutine, an
		// extra write each.
		FlushInterval: 10 * time.Millisecond,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, "bareproxy: full duplex: "+err.Error(), http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(w, r)
	})
}
