package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// binary is the idemgate executable built once by TestMain (with -race, so
// the e2e runs also check the binary for data races).
var binary string

func TestMain(m *testing.M) {
	path, remove, err := gatetest.Build("../cmd/idemgate", "idemgate", "-race")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binary = path
	code := m.Run()
	remove()
	os.Exit(code)
}

// Gate is one running idemgate process.
type Gate struct {
	t        *testing.T
	exe      string // the executable; "" is binary
	URL      string // proxy base URL
	AdminURL string
	config   string
	args     []string
	mu       sync.Mutex
	cmd      *exec.Cmd
	logs     *syncbuf.Buffer
	exited   chan struct{}
}

// gateConfig describes a config file; Defaults and Routes are YAML
// fragments indented as under their keys.
type gateConfig struct {
	Upstream    string
	ValkeyAddrs []string // empty: memory store (or Postgres when PostgresDSN is set)
	ValkeyExtra string   // lines under store.valkey: after addrs, each "    key: value"
	PostgresDSN string   // set: the postgres store on this database
	Defaults    string   // extra lines under defaults:, each "  key: value"
	Routes      string   // lines under routes:
	AdminToken  string
	UpTimeout   string
	Extra       string // top-level YAML (e.g. a server: section), each line unindented
	Sections    string // extra top-level sections, e.g. "problems:\n  docs_url: ...\n"
}

func (c gateConfig) yaml(listen, adminListen string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\n", listen)
	timeout := c.UpTimeout
	if timeout == "" {
		timeout = "30s"
	}
	fmt.Fprintf(&b, "upstream:\n  url: %q\n  timeout: %s\n", c.Upstream, timeout)
	fmt.Fprintf(&b, "admin:\n  listen: %q\n  token: %q\n", adminListen, c.AdminToken)
	if len(c.ValkeyAddrs) > 0 {
		fmt.Fprintf(&b, "store:\n  driver: valkey\n  valkey:\n    addrs: [%s]\n", quoteJoin(c.ValkeyAddrs))
		b.WriteString(c.ValkeyExtra)
	} else if c.PostgresDSN != "" {
		fmt.Fprintf(&b, "store:\n  driver: postgres\n  postgres:\n    dsn: %q\n", c.PostgresDSN)
	} else {
		b.WriteString("store:\n  driver: memory\n")
	}
	b.WriteString("log:\n  format: json\n  level: info\n")
	b.WriteString(c.Extra)
	b.WriteString(c.Sections)
	b.WriteString("defaults:\n  owner: \"header:X-User\"\n  lease: 2s\n  wait_timeout: 10s\n")
	b.WriteString(c.Defaults)
	if c.Routes != "" {
		b.WriteString("routes:\n")
		b.WriteString(c.Routes)
	}
	return b.String()
}

func quoteJoin(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// startGate writes the config and starts idemgate on free loopback ports,
// waiting until /healthz answers. The process is stopped in t.Cleanup.
//
// A free port is free when it is picked, not when idemgate binds it: a
// process of another package's tests may take it in between. A start that
// fails on a port taken ("address already in use") is tried again on new
// ports, a few times.
func startGate(t *testing.T, c gateConfig) *Gate {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	for attempt := 1; ; attempt++ {
		listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
		adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
		if err := os.WriteFile(path, []byte(c.yaml(listen, adminListen)), 0o600); err != nil {
			t.Fatal(err)
		}
		g := newGate(t, listen, adminListen, path)
		if g.start(attempt < 3) {
			return g
		}
		t.Logf("idemgate found a port taken at start, trying new ports:\n%s", g.logs.String())
	}
}

// runGate starts idemgate serving the config file at path on the given
// listen addresses (extra flags after the config), and stops it in
// t.Cleanup.
func runGate(t *testing.T, listen, adminListen, path string, extra ...string) *Gate {
	t.Helper()
	g := newGate(t, listen, adminListen, path, extra...)
	g.Start()
	return g
}

// newGate is the Gate of idemgate serving the config file at path on the
// given listen addresses, not started yet; it is stopped in t.Cleanup.
func newGate(t *testing.T, listen, adminListen, path string, extra ...string) *Gate {
	t.Helper()
	g := &Gate{t: t, URL: "http://" + listen, AdminURL: "http://" + adminListen, config: path,
		args: append([]string{"serve", "--config", path, "--wait-store", "10s"}, extra...), logs: &syncbuf.Buffer{}}
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("idemgate logs:\n%s", g.logs.String())
		}
	})
	return g
}

// Start (re)starts the process with the same config and ports.
func (g *Gate) Start() {
	g.t.Helper()
	g.start(false)
}

// start starts the process and waits until it is healthy. When it exits
// at start because a port was taken and retryPortTaken is set, start
// reports false (the caller picks new ports); every other failure is
// fatal.
func (g *Gate) start(retryPortTaken bool) bool {
	g.t.Helper()
	exe := g.exe
	if exe == "" {
		exe = binary
	}
	cmd := exec.Command(exe, g.args...)
	cmd.Stdout, cmd.Stderr = g.logs, g.logs
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("starting idemgate: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	g.mu.Lock()
	g.cmd, g.exited = cmd, exited
	g.mu.Unlock()
	healthy, up := false, gatetest.Serves(g.AdminURL+"/healthz", 200)
	gatetest.Until(20*time.Second, func() bool {
		if healthy = up(); healthy {
			return true
		}
		select {
		case <-exited:
			return true
		default:
			return false
		}
	})
	if healthy {
		return true
	}
	select {
	case <-exited:
		if retryPortTaken && strings.Contains(g.logs.String(), "address already in use") {
			return false
		}
		g.t.Fatalf("idemgate exited at start:\n%s", g.logs.String())
	default:
	}
	g.t.Fatalf("idemgate did not become healthy:\n%s", g.logs.String())
	return false
}

func (g *Gate) signal(sig syscall.Signal, wait time.Duration) {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	gatetest.Signal(cmd.Process, exited, sig, wait)
}

// Stop sends SIGTERM and waits for a graceful exit (SIGKILL after 15 s).
func (g *Gate) Stop() { g.signal(syscall.SIGTERM, 15*time.Second) }

// Kill ends the process at once with SIGKILL, as a crash would.
func (g *Gate) Kill() { g.signal(syscall.SIGKILL, 5*time.Second) }

// Logs returns everything the process printed.
func (g *Gate) Logs() string { return g.logs.String() }

// Upstream is a real HTTP backend that counts what it executes per
// (owner, idempotency key) and answers like an API creating a resource.
type Upstream struct {
	*httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	total   int
	Handler http.HandlerFunc // optional override, called after counting
	Delay   time.Duration
	Entered chan struct{} // optional: receives once per call
}

func startUpstream(t *testing.T) *Upstream {
	u := &Upstream{calls: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("X-User") + "|" + r.Header.Get("Idempotency-Key")
	u.mu.Lock()
	u.calls[id]++
	u.total++
	n := u.total
	h, delay, entered := u.Handler, u.Delay, u.Entered
	u.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if h != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json; charset=utf-8")
	hd.Set("Location", fmt.Sprintf("/v1/orders/%d", n))
	hd.Set("ETag", fmt.Sprintf(`"%d"`, n))
	hd.Add("Set-Cookie", "session=abc; Path=/; HttpOnly")
	hd.Add("Set-Cookie", "theme=dark; Path=/")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d,"owner":%q,"request":%q}`, n, r.Header.Get("X-User"), body)
}

// Calls returns how many times the upstream executed (owner, key).
func (u *Upstream) Calls(owner, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[owner+"|"+key]
}

// Total returns how many requests the upstream executed.
func (u *Upstream) Total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}

// Set changes the handler, delay and entered channel under the lock.
func (u *Upstream) Set(h http.HandlerFunc, delay time.Duration, entered chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.Handler, u.Delay, u.Entered = h, delay, entered
}

// Answer is a complete HTTP answer as a client saw it.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

func (a Answer) replayed() bool { return a.Header.Get("Idempotent-Replayed") == "true" }

// post sends one POST with an owner and key (either may be "") and reads
// the whole answer.
func post(ctx context.Context, url, owner, key, body string) Answer {
	return answerOf(gatetest.Post(ctx, nil, url, "", gatetest.Keyed(owner, key), body))
}

// postHeaders sends one POST of a JSON body with the fields of h (and Host
// host, when not "") within d, and reads the whole answer: what the
// helpers for one kind of client (a virtual host, a bearer token, a
// platform account) build on.
func postHeaders(d time.Duration, url, host, body string, h http.Header) Answer {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return answerOf(gatetest.Post(ctx, nil, url, host, h, body))
}

// answerOf is what gatetest.Post returned, as an Answer.
func answerOf(resp *http.Response, body []byte, err error) Answer {
	if resp == nil {
		return Answer{Err: err}
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: body, Err: err}
}

func mustPost(t *testing.T, url, owner, key, body string) Answer {
	t.Helper()
	a := post(context.Background(), url, owner, key, body)
	if a.Err != nil {
		t.Fatalf("POST %s: %v", url, a.Err)
	}
	return a
}
