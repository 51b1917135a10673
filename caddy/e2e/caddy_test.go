package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// caddyBinary is the Caddy TestMain builds.
var caddyBinary string

func TestMain(m *testing.M) {
	start := time.Now()
	path, remove, err := gatetest.Build("../cmd/caddy", "caddy")
	if err != nil {
		fmt.Fprintln(os.Stderr, "caddy e2e: Caddy with the idempotency module:", err)
		os.Exit(1)
	}
	caddyBinary = path
	fmt.Fprintf(os.Stderr, "caddy e2e: built Caddy with the idempotency module in %v\n", time.Since(start).Round(100*time.Millisecond))
	code := m.Run()
	remove()
	os.Exit(code)
}

// upstream is the backend behind Caddy's reverse_proxy: it counts the POSTs
// it executes and answers 201 with a body that names the execution.
type upstream struct {
	URL   string // http://127.0.0.1:port
	execs atomic.Int64
	hold  chan struct{} // when set, each POST waits for it to close
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.URL = gatetest.CountingUpstream(t, &u.execs, u.create).URL
	return u
}

// serveOn starts the upstream on a listener of the caller's (a port
// reserved earlier).
func serveOn(t *testing.T, port int) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on reserved port %d: %v", port, err)
	}
	u := &upstream{}
	u.URL = gatetest.CountingUpstreamOn(t, ln, &u.execs, u.create).URL
	return u
}

// create is a POST, counted already: it waits for hold when set and
// answers 201 naming its execution.
func (u *upstream) create(w http.ResponseWriter, r *http.Request, n int64) {
	body, _ := io.ReadAll(r.Body)
	if u.hold != nil {
		<-u.hold
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Execution", strconv.FormatInt(n, 10))
	w.Header().Set("Location", "/orders/"+strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"execution":%d,"user":%q,"body":%q}`, n, r.Header.Get("X-User"), body)
}

// idemgateYAML is the configuration every Caddy here loads: the Valkey
// store (its address and key prefix come from the directive's inline
// options), owners by X-User, a short lease.
const idemgateYAML = `
store:
  driver: valkey` + noStoreYAML

// caddyProc is one running Caddy.
type caddyProc struct {
	URL      string // http://127.0.0.1:port
	AdminURL string
	cmd      *exec.Cmd
	out      *syncbuf.Buffer
	exited   chan struct{}

	dir             string // its files: the Caddyfile, idemgate.yaml, data
	port, adminPort int
}

// startCaddy runs Caddy with a Caddyfile that puts idempotency (its inline
// options: store_addrs, key_prefix) before reverse_proxy to up, on a free
// 127.0.0.1 port, its admin endpoint on another; it returns once Caddy
// answers and stops it in t.Cleanup.
func startCaddy(t *testing.T, valkeyAddr, keyPrefix, up string) *caddyProc {
	t.Helper()
	return runCaddy(t, caddySite{
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix %s", valkeyAddr, keyPrefix),
		After:       "reverse_proxy " + strings.TrimPrefix(up, "http://"),
	})
}

// caddySite is the one site of a Caddy that runCaddy starts.
type caddySite struct {
	// YAML is idemgate's configuration file; idemgateYAML when "".
	YAML string
	// Global is added to the global options block (admin, auto_https,
	// storage are set).
	Global string
	// Idempotency is the idempotency block's lines after "config <the
	// YAML's path>".
	Idempotency string
	// Directive, when set, is the whole idempotency directive instead of
	// that block, $CONFIG standing for the YAML's path.
	Directive string
	// After is the site's directives besides idempotency, e.g.
	// reverse_proxy and handle_errors.
	After string
	// Sites is added after the site: other sites of the configuration
	// (or named routes), $CONFIG standing for the YAML's path.
	Sites string
	// Snippets is added before the site, which may import them, $CONFIG
	// standing for the YAML's path.
	Snippets string
	// Hosts, when set, replaces the one site on 127.0.0.1 by a site per
	// host, http://HOST:PORT on the same listener, each with its own
	// idempotency handler (named after the host, Idempotency's lines
	// included) and the host's directives instead of After.
	Hosts map[string]string
}

// runCaddy runs Caddy with site on a free 127.0.0.1 port (http://), its
// admin endpoint on another; it returns once Caddy answers and stops it in
// t.Cleanup.
func runCaddy(t *testing.T, site caddySite) *caddyProc {
	t.Helper()
	c, err := tryRunCaddy(t, site)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tryRunCaddy is runCaddy, returning an error with Caddy's output when
// Caddy exits during its start (a configuration it refuses).
func tryRunCaddy(t *testing.T, site caddySite) (*caddyProc, error) {
	t.Helper()
	dir := t.TempDir()
	port, adminPort := valkeytest.FreePort(t), valkeytest.FreePort(t)
	c := &caddyProc{
		URL:       fmt.Sprintf("http://127.0.0.1:%d", port),
		AdminURL:  fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		out:       &syncbuf.Buffer{},
		exited:    make(chan struct{}),
		dir:       dir,
		port:      port,
		adminPort: adminPort,
	}
	path := c.writeConfig(t, site)
	c.cmd = exec.Command(caddyBinary, "run", "--config", path, "--adapter", "caddyfile")
	c.cmd.Dir = dir
	c.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start caddy: %v", err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(c.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(c.URL + "/")
		if err == nil {
			resp.Body.Close()
			return c, nil
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("caddy exited during start:\n%s", c.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not answer on %s within 30s: %v\n%s", c.URL, err, c.out.String())
		}
	}
}

// writeConfig writes site's idemgate.yaml and Caddyfile in c's directory,
// on c's ports, and returns the Caddyfile's path.
func (c *caddyProc) writeConfig(t *testing.T, site caddySite) string {
	t.Helper()
	if site.YAML == "" {
		site.YAML = idemgateYAML
	}
	cfgPath := filepath.Join(c.dir, "idemgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(site.YAML), 0o600); err != nil {
		t.Fatal(err)
	}
	directive := fmt.Sprintf("idempotency {\n\t\tconfig %s\n\t\t%s\n\t}", cfgPath, site.Idempotency)
	if site.Directive != "" {
		directive = strings.ReplaceAll(site.Directive, "$CONFIG", cfgPath)
	}
	block := func(host, directive, after string) string {
		return fmt.Sprintf(`
http://%s:%d {
	bind 127.0.0.1
	%s
	%s
}
`, host, c.port, directive, after)
	}
	sites := block("127.0.0.1", directive, site.After)
	if len(site.Hosts) > 0 {
		sites = ""
		for host, after := range site.Hosts {
			named := fmt.Sprintf("idempotency {\n\t\tconfig %s\n\t\tname %s\n\t\t%s\n\t}", cfgPath, host, site.Idempotency)
			sites += block(host, named, after)
		}
	}
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	persist_config off
	storage file_system %s
	%s
}
%s%s%s
`, c.adminPort, filepath.Join(c.dir, "data"), site.Global, strings.ReplaceAll(site.Snippets, "$CONFIG", cfgPath), sites, strings.ReplaceAll(site.Sites, "$CONFIG", cfgPath))
	path := filepath.Join(c.dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stop ends Caddy (SIGTERM, SIGKILL after 10s) and waits for it.
func (c *caddyProc) stop() { gatetest.Signal(c.cmd.Process, c.exited, syscall.SIGTERM, 10*time.Second) }

// answer is a response as the client read it.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

func (a answer) replayed() bool { return a.Header.Get("Idempotent-Replayed") == "true" }

func post(t *testing.T, url, user, key, body string) answer {
	t.Helper()
	a, err := tryPost(url, user, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func tryPost(url, user, key, body string) (answer, error) {
	return tryPostHost(url, "", user, key, body)
}

// postHost is post with the Host field host.
func postHost(t *testing.T, url, host, user, key, body string) answer {
	t.Helper()
	a, err := tryPostHost(url, host, user, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryPostHost sends POST url/orders with the Host field host (url's when
// "") and reads the whole answer.
func tryPostHost(url, host, user, key, body string) (answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, b, err := gatetest.Post(ctx, nil, url+"/orders", host, http.Header{"Idempotency-Key": {key}, "X-User": {user}}, body)
	if err != nil {
		return answer{}, fmt.Errorf("POST %s key %s: %w", url, key, err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, nil
}

// sameResponse fails unless replay is first replayed byte for byte: status,
// body and the upstream's fields.
func sameResponse(t *testing.T, first, replay answer) {
	t.Helper()
	if !replay.replayed() {
		t.Fatalf("retry not replayed (Idempotent-Replayed %q): %d %s", replay.Header.Get("Idempotent-Replayed"), replay.Status, replay.Body)
	}
	if first.replayed() {
		t.Fatalf("first response says Idempotent-Replayed: true")
	}
	if replay.Status != first.Status || replay.Body != first.Body {
		t.Fatalf("replay %d %q, first %d %q", replay.Status, replay.Body, first.Status, first.Body)
	}
	for _, h := range []string{"Content-Type", "X-Execution", "Location", "Content-Length"} {
		if replay.Header.Get(h) != first.Header.Get(h) {
			t.Fatalf("replay %s %q, first %q", h, replay.Header.Get(h), first.Header.Get(h))
		}
	}
}

// problemType is gatetest.ProblemType of a's body.
func problemType(a answer) string { return gatetest.ProblemType([]byte(a.Body)) }

// TestCaddyForwardOnceThenReplay: the first request of a key reaches the
// upstream through Caddy once; its retry is the stored response, byte for
// byte, with Idempotent-Replayed: true. Caddy's metrics registry has the
// module's metrics.
func TestCaddyForwardOnceThenReplay(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	c := startCaddy(t, vk.Addr(), "caddy-replay:", up.URL)

	first := post(t, c.URL, "alice", "k-1", `{"amount":100}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s\n%s", first.Status, first.Body, c.out.String())
	}
	retry := post(t, c.URL, "alice", "k-1", `{"amount":100}`)
	sameResponse(t, first, retry)
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}

	resp, err := http.Get(c.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(metrics), "idemgate_requests_total{") {
		t.Fatalf("Caddy's /metrics has no idemgate_requests_total:\n%.2000s", metrics)
	}
}

// TestCaddyKeyReusedOnAnotherRequest: the same key with another body is
// 422 key-reused, and the upstream is not called again.
func TestCaddyKeyReusedOnAnotherRequest(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	c := startCaddy(t, vk.Addr(), "caddy-422:", up.URL)

	if a := post(t, c.URL, "alice", "k-1", `{"amount":100}`); a.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	a := post(t, c.URL, "alice", "k-1", `{"amount":999}`)
	if a.Status != http.StatusUnprocessableEntity || !strings.HasSuffix(problemType(a), "key-reused") {
		t.Fatalf("same key, other body: %d %s, want 422 key-reused", a.Status, a.Body)
	}
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyOwnersNeverShare: two owners (X-User) sending the same key and
// body each get their own execution and their own replay.
func TestCaddyOwnersNeverShare(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	c := startCaddy(t, vk.Addr(), "caddy-owners:", up.URL)

	alice := post(t, c.URL, "alice", "shared", `{"amount":1}`)
	bob := post(t, c.URL, "bob", "shared", `{"amount":1}`)
	if alice.Status != http.StatusCreated || bob.Status != http.StatusCreated || bob.replayed() {
		t.Fatalf("alice %d %s, bob %d replayed=%v %s: want two fresh 201s", alice.Status, alice.Body, bob.Status, bob.replayed(), bob.Body)
	}
	if !strings.Contains(alice.Body, `"user":"alice"`) || !strings.Contains(bob.Body, `"user":"bob"`) {
		t.Fatalf("bodies crossed owners: alice %s, bob %s", alice.Body, bob.Body)
	}
	sameResponse(t, alice, post(t, c.URL, "alice", "shared", `{"amount":1}`))
	sameResponse(t, bob, post(t, c.URL, "bob", "shared", `{"amount":1}`))
	if n := up.execs.Load(); n != 2 {
		t.Fatalf("upstream executed %d times, want 2 (one per owner)", n)
	}
}

// TestCaddyConcurrentDuplicates: 50 copies of one request at once reach
// the upstream once, and every client gets that one response.
func TestCaddyConcurrentDuplicates(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	up.hold = make(chan struct{})
	c := startCaddy(t, vk.Addr(), "caddy-dups:", up.URL)

	const n = 50
	answers := make([]answer, n)
	errs := make([]error, n)
	var sent, done sync.WaitGroup
	sent.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			sent.Done()
			answers[i], errs[i] = tryPost(c.URL, "alice", "dup", `{"amount":5}`)
		}()
	}
	// The upstream holds the one execution until every client has started
	// sending, so that most duplicates arrive while it runs; the outcome
	// asserted below is the same for any that arrive after it.
	sent.Wait()
	close(up.hold)
	done.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if answers[i].Status != http.StatusCreated || answers[i].Body != answers[0].Body {
			t.Fatalf("client %d: %d %s, client 0: %d %s", i, answers[i].Status, answers[i].Body, answers[0].Status, answers[0].Body)
		}
	}
	if got := up.execs.Load(); got != 1 {
		t.Fatalf("upstream executed %d times for %d concurrent duplicates, want 1", got, n)
	}
}

// TestCaddyStoreDownFailsClosed: with Valkey gone, a keyed request is 503
// store-unavailable and nothing reaches the upstream; once the module's
// connector finds the store down (idemgate_store_up 0 on Caddy's
// /metrics), the 503 comes at once with Retry-After, not after the store
// timeout (2 s). When Valkey is back, the request runs once.
func TestCaddyStoreDownFailsClosed(t *testing.T) {
	// Kept on disk: the record written before the kill is there after.
	vk := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	c := startCaddy(t, vk.Addr(), "caddy-down:", up.URL)
	if a := post(t, c.URL, "alice", "before", `{}`); a.Status != http.StatusCreated {
		t.Fatalf("with the store up: %d %s", a.Status, a.Body)
	}
	vk.Kill()
	a := post(t, c.URL, "alice", "after", `{}`)
	if a.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(a), "store-unavailable") {
		t.Fatalf("store down: %d %s, want 503 store-unavailable", a.Status, a.Body)
	}
	c.waitMetric(t, "idemgate_store_up 0")
	start := time.Now()
	a = post(t, c.URL, "alice", "after", `{}`)
	if took := time.Since(start); took >= time.Second {
		t.Errorf("refused after %v with the store known down; want at once (under 1s, the store timeout is 2s)", took)
	}
	if a.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(a), "store-unavailable") || a.Header.Get("Retry-After") == "" {
		t.Fatalf("store known down: %d Retry-After=%q %s, want 503 store-unavailable with Retry-After", a.Status, a.Header.Get("Retry-After"), a.Body)
	}
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1 (nothing forwarded with the store down)", n)
	}
	vk.Restart()
	c.waitMetric(t, "idemgate_store_up 1")
	if a := post(t, c.URL, "alice", "after", `{}`); a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("once the store is back: %d %s, want it run", a.Status, a.Body)
	}
	if a := post(t, c.URL, "alice", "after", `{}`); !a.replayed() {
		t.Fatalf("retry once the store is back: %d %s, want the replay", a.Status, a.Body)
	}
	if n := up.execs.Load(); n != 2 {
		t.Fatalf("upstream executed %d times, want 2", n)
	}
}

// waitMetric polls Caddy's /metrics, up to 15 s, for a line that reads
// line.
func (c *caddyProc) waitMetric(t *testing.T, line string) {
	t.Helper()
	if !gatetest.Until(15*time.Second, func() bool {
		resp, err := http.Get(c.AdminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains("\n"+string(b), "\n"+line+"\n")
	}) {
		t.Fatalf("Caddy's /metrics never had %q", line)
	}
}

// TestCaddyTwoInstancesOneValkey: a key sent to one Caddy is replayed by
// another Caddy on the same Valkey serving the same site (the Host is in
// the key scope in process, so both are sent api.example, as behind one
// load balancer), and the upstream runs once.
func TestCaddyTwoInstancesOneValkey(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	site := caddySite{
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-two:", vk.Addr()),
		Hosts:       map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")},
	}
	a, b := runCaddy(t, site), runCaddy(t, site)

	first := postHost(t, a.URL, "api.example", "alice", "k-2", `{"amount":7}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("first on Caddy A: %d %s", first.Status, first.Body)
	}
	sameResponse(t, first, postHost(t, b.URL, "api.example", "alice", "k-2", `{"amount":7}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times across two Caddy instances, want 1", n)
	}
}

// TestCaddyNextErrorReleasesKey: reverse_proxy's dial error (an error
// returned with nothing written) reaches the client as the standalone
// proxy's answer to its own dial failure, 502 upstream-unreachable
// (problem details), and is not stored: the retry, once the upstream is
// up, runs and gets the upstream's answer.
func TestCaddyNextErrorReleasesKey(t *testing.T) {
	vk := valkeytest.Start(t)
	port := valkeytest.FreePort(t) // nothing listens there yet
	c := startCaddy(t, vk.Addr(), "caddy-502:", fmt.Sprintf("http://127.0.0.1:%d", port))

	a := post(t, c.URL, "alice", "k-3", `{"amount":3}`)
	if a.Status != http.StatusBadGateway || !strings.HasSuffix(problemType(a), "upstream-unreachable") || a.replayed() {
		t.Fatalf("upstream down: %d %s (replayed %v), want 502 upstream-unreachable", a.Status, a.Body, a.replayed())
	}
	up := serveOn(t, port)
	checkRetryRunsOnce(t, c.URL, "k-3", `{"amount":3}`, up, "up")
}

// checkRetryRunsOnce retries alice's POST of body with key at url once up
// serves it: the answer is a fresh 201, not a replay, and up ran the
// operation once. when says how up is in failures ("up", "back").
func checkRetryRunsOnce(t *testing.T, url, key, body string, up *upstream, when string) {
	t.Helper()
	retry := post(t, url, "alice", key, body)
	if retry.Status != http.StatusCreated || retry.replayed() {
		t.Fatalf("retry with the upstream %s: %d %s (replayed %v), want a fresh 201", when, retry.Status, retry.Body, retry.replayed())
	}
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyfileExampleAdapts: the Caddyfile example adapts, with the
// idempotency handler before reverse_proxy (the directive's order) and its
// inline options as overrides.
func TestCaddyfileExampleAdapts(t *testing.T) {
	out, err := exec.Command(caddyBinary, "adapt", "--config", "../Caddyfile.example", "--adapter", "caddyfile").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	s := string(out)
	idem, rp := strings.Index(s, `"handler":"idempotency"`), strings.Index(s, `"handler":"reverse_proxy"`)
	if idem < 0 || rp < 0 || idem > rp {
		t.Fatalf("want the idempotency handler before reverse_proxy:\n%s", s)
	}
	for _, want := range []string{
		`"config":"/etc/idemgate/idemgate.yaml"`,
		`"store.valkey.addrs":"10.0.0.5:6379,10.0.0.6:6379"`,
		`"store.valkey.key_prefix":"idemgate:"`,
		`"store.valkey.username":"caddy"`,
	} {
		if !strings.Contains(s, want) {
			t.Fatalf("adapted JSON lacks %s:\n%s", want, s)
		}
	}
}

// TestReadmeCaddyfilesAdapt: every Caddyfile snippet of the READMEs (the
// repository's "Inside Caddy", caddy/README.md's, gRPC's included) adapts,
// with the idempotency handler before reverse_proxy, so that what a reader
// copies runs.
func TestReadmeCaddyfilesAdapt(t *testing.T) {
	n := 0
	for _, readme := range []string{"../../README.md", "../README.md"} {
		text, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		rest := string(text)
		for {
			_, after, ok := strings.Cut(rest, "```caddyfile\n")
			if !ok {
				break
			}
			snippet, tail, ok := strings.Cut(after, "```")
			if !ok {
				t.Fatalf("%s: a caddyfile block without its end", readme)
			}
			rest = tail
			n++
			path := filepath.Join(t.TempDir(), "Caddyfile")
			if err := os.WriteFile(path, []byte(snippet), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(caddyBinary, "adapt", "--config", path, "--adapter", "caddyfile").CombinedOutput()
			if err != nil {
				t.Fatalf("%s: caddy adapt of\n%s: %v\n%s", readme, snippet, err, out)
			}
			s := string(out)
			// The last reverse_proxy: forward_auth is one too, before.
			idem, rp := strings.Index(s, `"handler":"idempotency"`), strings.LastIndex(s, `"handler":"reverse_proxy"`)
			if idem < 0 || rp < 0 || idem > rp {
				t.Fatalf("%s: want the idempotency handler before reverse_proxy in\n%s\nadapted:\n%s", readme, snippet, s)
			}
		}
	}
	if n < 3 {
		t.Fatalf("%d caddyfile snippets in the READMEs, want at least 3 (the test reads them from the wrong place?)", n)
	}
}

// TestCaddyBrokenUpstreamKeepsTheClaim: an upstream that acts, sends 201
// and half of its body, then cuts the connection. reverse_proxy aborts the
// response (http.ErrAbortHandler): the operation took place, so the engine
// keeps the claim and stores nothing, as the standalone proxy does for an
// answer cut short. The client's connection is cut; the retry gets 409
// (the claim runs until its lease ends), never a second execution and
// never the truncated body as a success.
func TestCaddyBrokenUpstreamKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	var execs atomic.Int64
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"execution":1,`)
		w.(http.Flusher).Flush()
		gatetest.HangUp(w)
	})
	c := startCaddy(t, vk.Addr(), "caddy-broken:", up.URL)

	// The client's connection is cut mid-body (or its own transparent
	// retry meets the kept claim): either way not a clean success.
	if a, err := tryPost(c.URL, "alice", "k-4", `{"amount":4}`); err == nil && a.Status == http.StatusCreated {
		t.Fatalf("first answer: a complete 201 %q from an upstream that broke off", a.Body)
	}
	retry := post(t, c.URL, "alice", "k-4", `{"amount":4}`)
	if retry.Status != http.StatusConflict || retry.replayed() {
		t.Fatalf("retry after the upstream broke off: %d %s (replayed %v), want 409 with the claim kept", retry.Status, retry.Body, retry.replayed())
	}
	if n := execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}
