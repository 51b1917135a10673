package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/e2e/internal/nginxtest"
)

// nginxHTTP is target N's http block: a reverse proxy to the upstream as
// an nginx in front of an API is usually set up for speed. Keep-alive to
// the upstream (an upstream block with keepalive, HTTP/1.1 and an empty
// Connection header, or nginx opens a connection per request), and
// keepalive_requests raised on both sides so that, like the Go targets,
// nginx never closes a busy keep-alive connection after 1,000 requests
// (its default). Everything else is nginx's default: request and response
// buffering on, no access log (set in nginxtest.Config).
func nginxHTTP(listen, upstreamHost string) string {
	return fmt.Sprintf(`
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    upstream api {
        server %s;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen %s;
        location / {
            proxy_pass http://api;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
`, upstreamHost, listen)
}

// startNginxSplit starts target S: nginx in front with the split of
// docs/nginx.md (the block e2e's TestNginxSendsOnlyKeyedWritesToIdemgate
// runs), sending keyed POSTs and PATCHes to idemgate at idemgateAddr
// (host:port) and everything else straight to the upstream, one worker per
// CPU. Its proc measures nginx alone: idemgate's CPU is its own process's.
func startNginxSplit(ctx context.Context, dir, root, upURL, idemgateAddr string, install bool) (p *proc, stop func(), err error) {
	bin, err := nginxtest.Find()
	if err != nil && install {
		bin, err = nginxtest.Install(ctx, os.Stderr)
	}
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(upURL)
	if err != nil {
		return nil, nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	conf, err := nginxtest.DocSplit(filepath.Join(root, "docs", "nginx.md"), idemgateAddr, u.Host, listen)
	if err != nil {
		return nil, nil, err
	}
	ndir := filepath.Join(dir, "nginx-split")
	if err := os.Mkdir(ndir, 0o700); err != nil {
		return nil, nil, err
	}
	srv, err := nginxtest.Start(ctx, nginxtest.Options{Bin: bin, Dir: ndir, Workers: runtime.NumCPU(), Listen: listen,
		HTTP: "    keepalive_requests 1000000;\n    keepalive_timeout 120s;\n" + conf})
	if err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { <-srv.Exited(); close(exited) }()
	p = &proc{name: "nginx-split", cmd: srv.Cmd, addr: listen, log: srv.Log, exited: exited, tree: srv.PIDs}
	if err := waitHTTP(ctx, p, "http://"+listen+"/stats"); err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return p, srv.Stop, nil
}

// startNginx starts target N in front of upURL with one worker per CPU,
// installing nginx with apt-get first when install is set and it is
// missing. The returned proc measures the master and its workers; stop
// ends them.
func startNginx(ctx context.Context, dir, upURL string, install bool) (p *proc, version string, stop func(), err error) {
	bin, err := nginxtest.Find()
	if err != nil && install {
		fmt.Fprintln(os.Stderr, "nginx not found: installing it with apt-get ...")
		bin, err = nginxtest.Install(ctx, os.Stderr)
	}
	if err != nil {
		return nil, "", nil, err
	}
	u, err := url.Parse(upURL)
	if err != nil {
		return nil, "", nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	ndir := filepath.Join(dir, "nginx")
	if err := os.Mkdir(ndir, 0o700); err != nil {
		return nil, "", nil, err
	}
	srv, err := nginxtest.Start(ctx, nginxtest.Options{Bin: bin, Dir: ndir, Workers: runtime.NumCPU(), Listen: listen, HTTP: nginxHTTP(listen, u.Host)})
	if err != nil {
		return nil, "", nil, err
	}
	exited := make(chan struct{})
	go func() { <-srv.Exited(); close(exited) }()
	p = &proc{name: "nginx", cmd: srv.Cmd, addr: listen, log: srv.Log, exited: exited, tree: srv.PIDs}
	if err := waitHTTP(ctx, p, "http://"+listen+"/stats"); err != nil {
		srv.Stop()
		return nil, "", nil, err
	}
	out, _ := exec.Command(bin, "-v").CombinedOutput() // "nginx version: nginx/1.22.1", on stderr
	version = strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
	return p, version, srv.Stop, nil
}
