package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// adminToken is the bearer token of every gate the fault tests start.
const adminToken = "fault-suite-admin-token"

// startGateWith is startGate with the generated YAML passed through edit
// first (to add a server: section or change the log level), so the fault
// tests can reach settings gateConfig has no field for.
func startGateWith(t *testing.T, c gateConfig, edit func(string) string) *Gate {
	t.Helper()
	return startGateArgs(t, c, edit, "--wait-store", "10s")
}

// startGateArgs is startGateWith with the serve flags after --config FILE
// given by the caller (startGateWith passes --wait-store 10s, so the gate
// listens once its store is connected; without it the gate listens at
// once and connects in the background).
func startGateArgs(t *testing.T, c gateConfig, edit func(string) string, flags ...string) *Gate {
	t.Helper()
	return startGateExe(t, binary, c, edit, flags...)
}

// startGateExe is startGateArgs running the executable exe (another build
// of idemgate) instead of this one's.
func startGateExe(t *testing.T, exe string, c gateConfig, edit func(string) string, flags ...string) *Gate {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	doc := c.yaml(listen, adminListen)
	if edit != nil {
		doc = edit(doc)
	}
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Gate{t: t, exe: exe, URL: "http://" + listen, AdminURL: "http://" + adminListen, config: path,
		args: append([]string{"serve", "--config", path}, flags...), logs: &syncbuf.Buffer{}}
	g.Start()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("idemgate logs (%s):\n%s", listen, g.logs.String())
		}
	})
	return g
}

// appendYAML returns an edit for startGateWith that appends top-level YAML.
func appendYAML(extra string) func(string) string {
	return func(doc string) string { return doc + extra }
}

// addr is the host:port of the gate's proxy listener.
func (g *Gate) addr() string { return strings.TrimPrefix(g.URL, "http://") }

// problemType returns the suffix of an idemgate problem type URI in body
// ("store-unavailable"), or "" when body is not a problem document.
func problemType(body []byte) string { return gatetest.ProblemType(body) }

// isProblem reports whether a is an RFC 9457 problem of type kind with status.
func (a Answer) isProblem(status int, kind string) bool {
	return a.Err == nil && a.Status == status &&
		a.Header.Get("Content-Type") == "application/problem+json" && problemType(a.Body) == kind
}

func (a Answer) String() string {
	if a.Err != nil {
		return "error: " + a.Err.Error()
	}
	return fmt.Sprintf("%d replayed=%v %s", a.Status, a.replayed(), a.Body)
}

// postTimeout is post with a deadline, so a hung exchange fails the test
// instead of hanging it.
func postTimeout(d time.Duration, url, owner, key, body string) Answer {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return post(ctx, url, owner, key, body)
}

// adminDo sends an admin API request with the given bearer token ("" sends
// none) and returns the answer.
func adminDo(t *testing.T, method, url, token string) Answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// recordURL is the admin URL of the record of (owner h:OWNER, key) on the
// defaults route.
func recordURL(g *Gate, route, owner, key string, extra string) string {
	return fmt.Sprintf("%s/admin/records?route=%s&owner=h:%s&key=%s%s", g.AdminURL, route, owner, key, extra)
}

// eventually is gatetest.Eventually, under the name the e2e tests call.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	gatetest.Eventually(t, d, what, cond)
}

// startFillableValkey starts a valkey-server that Fill can fill: 16 MB
// of memory at most, and no eviction, so that a full one refuses writes
// (-OOM) instead of dropping records.
func startFillableValkey(t *testing.T) *valkeytest.Server {
	return valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
}

// holdFirstCall makes up hold the first call of key until unblock (called
// at the test's end at the latest, and after 30 s in any case); every
// other call answers 201 at once. Each call's body names its key, its
// number for the key and the upstream's total; entered receives once per
// call.
func holdFirstCall(t *testing.T, up *Upstream, key string) (entered chan struct{}, unblock func()) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	entered = make(chan struct{}, 32)
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		owner, k := r.Header.Get("X-User"), r.Header.Get("Idempotency-Key")
		n := up.Calls(owner, k)
		if k == key && n == 1 {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"call":%d,"total":%d}`, k, n, up.Total())
	}, 0, entered)
	return entered, unblock
}

// idemgateKeys returns every key under the idemgate: prefix on v with its
// PTTL in milliseconds (-1: no expiry, -2: gone meanwhile).
func idemgateKeys(t *testing.T, v *valkeytest.Server) map[string]int64 {
	t.Helper()
	out, err := v.CLI("--scan", "--pattern", "idemgate:*")
	if err != nil {
		t.Fatalf("scanning keys: %v", err)
	}
	keys := map[string]int64{}
	for _, k := range strings.Fields(out) {
		p, err := v.CLI("PTTL", k)
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			t.Fatalf("PTTL %s answered %q", k, p)
		}
		keys[k] = n
	}
	return keys
}

// rawExchange writes req on a new TCP connection to addr and reads one
// response (the connection is closed afterwards). It is for inputs net/http's
// client refuses to send.
func rawExchange(addr, req string, timeout time.Duration) (*http.Response, []byte, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, req); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// relayMode is what a relay does with the bytes between idemgate and Valkey.
type relayMode int

const (
	relayPass      relayMode = iota // forward both ways at once
	relayDelay                      // forward requests at once, replies after Delay
	relayBlackhole                  // accept and swallow everything, answer nothing; leaving it resets
	relayReset                      // close every connection, refuse new ones
)

// relay is a TCP proxy in front of one Valkey server that can delay or cut
// its replies, to play a slow or lossy network link. It listens on 127.0.0.1
// and is closed in t.Cleanup.
type relay struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    relayMode
	delay   time.Duration
	replCut bool // swallow the connections that carry replication
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *relay) Addr() string { return r.ln.Addr().String() }

// Set changes the mode; relayReset also closes every open connection, while
// relayBlackhole leaves them open and silent, like a link that died without
// a FIN. Leaving relayBlackhole closes every connection that lived through
// it: the bytes it swallowed are gone, and a TCP stream never carries on
// past a gap (a real link either delivers them late or the peers' kernels
// reset the connection). Forwarding on such a stream would pair every later
// reply with an earlier command, which no network does and which kept a
// healed link failing for as long as replies kept coming (valkey-go's
// liveness PING was answered by a reply that was not its own).
func (r *relay) Set(mode relayMode, delay time.Duration) {
	r.mu.Lock()
	left := r.mode == relayBlackhole && mode != relayBlackhole
	r.mode, r.delay = mode, delay
	var cut []net.Conn
	if mode == relayReset || left {
		for c := range r.conns {
			cut = append(cut, c)
		}
	}
	r.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
}

// CutReplication makes the relay swallow, both ways, every connection on
// which a replica has sent REPLCONF or PSYNC, while it keeps forwarding the
// other connections as its mode says: the primary keeps serving clients and
// acknowledging their writes, and its replica behind the relay gets none of
// them (nor its ACKs back). Unlike freezing the replica (SIGSTOP, whose
// kernel still buffers the stream and delivers it on resume), bytes the
// relay swallows are gone for good. CutReplication(false) forwards them
// again from then on (what was swallowed stays lost).
func (r *relay) CutReplication(cut bool) {
	r.mu.Lock()
	r.replCut = cut
	r.mu.Unlock()
}

func (r *relay) replicationCut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replCut
}

// isReplicationCommand reports whether b, the start of what a client sent
// (with the tail of the previous read), holds a replica's handshake.
func isReplicationCommand(b []byte) bool {
	u := bytes.ToUpper(b)
	return bytes.Contains(u, []byte("REPLCONF")) || bytes.Contains(u, []byte("PSYNC"))
}

func (r *relay) current() (relayMode, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mode, r.delay
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	_ = c.Close()
}

func (r *relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	r.wg.Wait()
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			_ = c.Close()
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(c)
		}()
	}
}

func (r *relay) serve(c net.Conn) {
	defer r.untrack(c)
	switch mode, _ := r.current(); mode {
	case relayReset:
		return
	case relayBlackhole:
		_, _ = io.Copy(io.Discard, c)
		return
	}
	s, err := net.DialTimeout("tcp", r.target, time.Second)
	if err != nil {
		return
	}
	if !r.track(s) {
		_ = s.Close()
		return
	}
	defer r.untrack(s)
	var replication atomic.Bool // c has sent a replica's handshake
	swallowed := func() bool { return replication.Load() && r.replicationCut() }
	done := make(chan struct{}, 2)
	go func() { // requests: forwarded unless the link swallows them
		buf := make([]byte, 32<<10)
		var tail []byte // end of the previous read, for a command cut in two
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if !replication.Load() {
					seen := append(tail, buf[:n]...)
					if isReplicationCommand(seen) {
						replication.Store(true)
					}
					tail = append([]byte(nil), seen[max(0, len(seen)-16):]...)
				}
				if mode, _ := r.current(); mode != relayBlackhole && !swallowed() {
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { // replies: delayed, swallowed or forwarded, in order
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				mode, delay := r.current()
				if mode == relayDelay {
					time.Sleep(delay)
				}
				if mode != relayBlackhole && !swallowed() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}
