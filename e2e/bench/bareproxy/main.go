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
	// The same transport as proxy.NewTransport, so B and C/D differ only by
	// the idempotency work.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	t.MaxIdleConnsPerHost = 256
	t.MaxIdleConns = 0 // as proxy.NewTransport: DefaultTransport's 100 capped the 256
	t.ResponseHeaderTimeout = 60 * time.Second
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: t,
		// As idemgate's passthrough (proxy.passthroughFlushInterval): -1
		// flushed every response's header from a timer goroutine, an
		// extra write each.
		FlushInterval: 10 * time.Millisecond,
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, l.Addr().String())
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Fatal(srv.Serve(l))
}
