// Package valkeytest starts throwaway valkey-server processes (standalone, cluster, sentinel) on loopback ports for tests.
package valkeytest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
)

// installHint is the message of the t.Fatal raised when a binary is missing.
const installHint = "run scripts/install-valkey.sh (Debian 12: apt-get install -t bookworm-backports valkey-server)"

// startTimeout bounds how long Start waits for a new server to answer PING.
const startTimeout = 15 * time.Second

// stopTimeout bounds how long Stop waits after SIGTERM before SIGKILL.
const stopTimeout = 5 * time.Second

// Option configures Start.
type Option func(*config)

type config struct {
	port    int
	aof     bool
	args    []string
	cluster bool
	dir     string
}

// WithAOF turns on the append-only file with appendfsync always, so every
// acknowledged write survives Kill followed by Restart.
func WithAOF() Option { return func(c *config) { c.aof = true } }

// WithArgs appends raw valkey-server arguments, e.g. WithArgs("--requirepass", "secret").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithDir makes the server keep its data (and log) in dir instead of a fresh
// directory under t.TempDir().
func WithDir(dir string) Option { return func(c *config) { c.dir = dir } }

// WithPort makes the server listen on port instead of a free one picked by
// Start (e.g. one reserved with FreePort, to start the server after a
// client was configured with its address).
func WithPort(port int) Option { return func(c *config) { c.port = port } }

// withCluster starts the server with cluster mode enabled.
func withCluster() Option { return func(c *config) { c.cluster = true } }

// Server is one valkey-server process on 127.0.0.1. Its methods are safe
// for concurrent use.
//
// Every process this package starts binds 127.0.0.1 only, keeps its files
// under t.TempDir() and is stopped by t.Cleanup. A missing valkey-server or
// valkey-cli fails the test (t.Fatal) with install instructions; only
// under -short it skips the test instead (package needs).
type Server struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	paused bool
}

// Binary returns the path of name (valkey-server, valkey-cli,
// valkey-sentinel) on PATH, or fails the test with install instructions
// (skips it under -short).
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		needs.Missing(t, name, fmt.Sprintf("%s not found: %s", name, installHint))
	}
	return p
}

// Start starts valkey-server on a free 127.0.0.1 port (whose port+10000
// cluster bus port is free too), waits until it answers PING and stops it
// in t.Cleanup. It fails the test when valkey-server is not installed.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := Binary(t, "valkey-server")
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.dir == "" {
		c.dir = t.TempDir()
	}
	port := c.port
	if port == 0 {
		port = FreePort(t)
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", c.dir,
		"--logfile", filepath.Join(c.dir, "valkey.log"),
		"--daemonize", "no",
		"--save", "",
		// DEBUG SLEEP and friends are used by fault tests.
		"--enable-debug-command", "local",
	}
	if c.aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if c.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(c.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		)
	}
	args = append(args, c.args...)
	s := &Server{t: t, port: port, dir: c.dir, args: append([]string{bin}, args...)}
	t.Cleanup(s.Stop)
	s.start()
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatalf("valkeytest: server on port %d already running", s.port)
	}
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("valkeytest: start %s: %v", s.args[0], err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.paused = cmd, done, false
	deadline := time.Now().Add(startTimeout)
	for {
		if err := ping(s.Addr()); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.t.Fatalf("valkeytest: server on %s did not answer PING within %v: %v (log: %s)", s.Addr(), startTimeout, err, s.logTail())
		}
		select {
		case <-done:
			s.cmd = nil
			s.t.Fatalf("valkeytest: server on %s exited during start (log: %s)", s.Addr(), s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "valkey.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data directory (AOF, nodes.conf, valkey.log).
func (s *Server) Dir() string { return s.dir }

// Stop ends the server (SIGTERM, SIGKILL after 5s) and waits for it to exit.
// Stopping a stopped server does nothing.
func (s *Server) Stop() { s.signalAndWait(syscall.SIGTERM) }

// Kill ends the server with SIGKILL (a crash: no shutdown save) and waits
// for it to exit.
func (s *Server) Kill() { s.signalAndWait(syscall.SIGKILL) }

func (s *Server) signalAndWait(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Restart stops the server if it runs and starts it again on the same port
// with the same data directory and arguments.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Pause freezes the server process (SIGSTOP): connections stay open but
// nothing is answered, like a stalled server. Stop and Kill resume it first.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

// CLI runs valkey-cli against the server with args (e.g. "PTTL", key) and
// returns its trimmed output. Output is raw (--no-raw is not set), so
// integers print bare.
func (s *Server) CLI(args ...string) (string, error) {
	return cli(s.t, s.port, args...)
}

// CPUSeconds returns the CPU time the server has used, used_cpu_sys +
// used_cpu_user from INFO cpu, in seconds: the benchmarks' measure of
// Valkey's own cost per operation (docs/performance.md).
func (s *Server) CPUSeconds() (float64, error) {
	out, err := s.CLI("INFO", "cpu")
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
				}
				sum += f
			}
		}
	}
	return sum, nil
}

func cli(t testing.TB, port int, args ...string) (string, error) {
	bin := Binary(t, "valkey-cli")
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("valkey-cli %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// ping sends an inline PING and accepts +PONG or a -NOAUTH error (a server
// with requirepass answers too).
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
		return nil
	}
	// -LOADING while the AOF is replayed: not ready yet.
	return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
}

// Cluster is a Valkey Cluster of masters, without replicas unless started
// with StartClusterWithReplicas.
type Cluster struct {
	// Servers are the master nodes, in the order given to --cluster create.
	Servers []*Server
	// Replicas are the replica nodes (StartClusterWithReplicas), each
	// replicating the master of the same index in Servers.
	Replicas []*Server
}

// StartCluster starts masters (>= 3) cluster-enabled servers, joins them
// with valkey-cli --cluster create, waits until every node reports
// cluster_state:ok and stops them in t.Cleanup.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, false)
}

// StartClusterWithReplicas is StartCluster with one replica per master: it
// waits as well until every replica's link to its master is up. Replicas[i]
// replicates Servers[i].
func StartClusterWithReplicas(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, true)
}

func startCluster(t testing.TB, masters int, withReplicas bool) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("valkeytest: a cluster needs at least 3 masters, got %d", masters)
	}
	Binary(t, "valkey-cli")
	c := &Cluster{}
	for range masters {
		c.Servers = append(c.Servers, Start(t, withCluster()))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := cli(t, c.Servers[0].port, args...); err != nil {
		t.Fatalf("valkeytest: cluster create: %v\n%s", err, out)
	}
	if withReplicas {
		for _, m := range c.Servers {
			id, err := m.CLI("CLUSTER", "MYID")
			if err != nil {
				t.Fatalf("valkeytest: CLUSTER MYID on %s: %v", m.Addr(), err)
			}
			r := Start(t, withCluster())
			if out, err := cli(t, r.port, "--cluster", "add-node", r.Addr(), m.Addr(), "--cluster-slave", "--cluster-master-id", id); err != nil {
				t.Fatalf("valkeytest: cluster add-node %s as replica of %s: %v\n%s", r.Addr(), m.Addr(), err, out)
			}
			c.Replicas = append(c.Replicas, r)
		}
		for _, r := range c.Replicas {
			r.WaitLinkUp(linkTimeout)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range append(append([]*Server(nil), c.Servers...), c.Replicas...) {
		for {
			out, err := s.CLI("CLUSTER", "INFO")
			if err == nil && strings.Contains(out, "cluster_state:ok") && strings.Contains(out, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("valkeytest: node %s not cluster_state:ok after 30s: %v\n%s", s.Addr(), err, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the "127.0.0.1:port" of every master.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// Sentinel is one valkey-sentinel process monitoring one master.
type Sentinel struct {
	*Server
	// MasterName is the name the master is monitored under (the
	// SentinelMaster of a client).
	MasterName string
}

// StartSentinel starts a valkey-sentinel on a free port that monitors master
// under masterName (quorum 1), waits until it knows the master's address and
// stops it in t.Cleanup.
func StartSentinel(t testing.TB, master *Server, masterName string) *Sentinel {
	t.Helper()
	bin := Binary(t, "valkey-server")
	dir := t.TempDir()
	port := FreePort(t)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n",
		port, dir, filepath.Join(dir, "valkey.log"), masterName, master.port, masterName)
	confPath := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatalf("valkeytest: write sentinel.conf: %v", err)
	}
	s := &Server{t: t, port: port, dir: dir, args: []string{bin, confPath, "--sentinel"}}
	t.Cleanup(s.Stop)
	s.start()
	deadline := time.Now().Add(startTimeout)
	for {
		out, err := s.CLI("SENTINEL", "get-master-addr-by-name", masterName)
		if err == nil && strings.Contains(out, strconv.Itoa(master.port)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("valkeytest: sentinel on %s does not know master %q: %v %s", s.Addr(), masterName, err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Sentinel{Server: s, MasterName: masterName}
}

// FillPrefix starts the name of every filler key Fill writes.
const FillPrefix = "valkeytest:filler:"

const (
	// fillChunk is the size of one filler value.
	fillChunk = 256 << 10
	// fillMargin is how far below used_memory Fill puts maxmemory.
	fillMargin = 2 << 20
	// fillTimeout bounds the whole fill and the free.
	fillTimeout = 30 * time.Second
)

// Fill makes a server started with --maxmemory and --maxmemory-policy
// noeviction full, as a Valkey whose data outgrew its memory is. It writes
// filler values of 256 KiB under FillPrefix until the server refuses one with
// -OOM, then lowers maxmemory to 2 MiB below used_memory: a fill alone stops
// just under the limit (the refused value itself was counted), where a small
// write may still fit and the outcome of each command would depend on client
// buffers coming and going. Past the limit by a margin, every command that
// may add data is refused with -OOM until free is called. Fill checks that a
// small SET is refused before it returns.
//
// free deletes the filler keys and restores maxmemory; it may be called more
// than once. Fill fails the test when the server has no maxmemory, evicts,
// or never refuses a write.
func (s *Server) Fill(t testing.TB) (free func()) {
	t.Helper()
	c, err := dialRESP(s.Addr(), fillTimeout)
	if err != nil {
		t.Fatalf("valkeytest: Fill on %s: %v", s.Addr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	fail := func(format string, args ...any) {
		t.Helper()
		_ = c.Close()
		t.Fatalf("valkeytest: Fill on %s: %s", s.Addr(), fmt.Sprintf(format, args...))
	}
	if v, err := c.do("CONFIG", "GET", "maxmemory-policy"); err != nil || len(v) != 2 || v[1] != "noeviction" {
		fail("needs --maxmemory-policy noeviction, server has %q (%v)", v, err)
	}
	v, err := c.do("CONFIG", "GET", "maxmemory")
	if err != nil || len(v) != 2 {
		fail("CONFIG GET maxmemory = %q, %v", v, err)
	}
	limit, err := strconv.ParseInt(v[1], 10, 64)
	if err != nil || limit <= 0 {
		fail("needs --maxmemory, server has %q", v[1])
	}
	value := strings.Repeat("f", fillChunk)
	n := 0
	for ; ; n++ {
		if int64(n) > 2*limit/fillChunk+64 {
			fail("%d filler values of %d bytes were accepted with maxmemory %d", n, fillChunk, limit)
		}
		_, err := c.do("SET", FillPrefix+strconv.Itoa(n), value)
		if isOOM(err) {
			break
		}
		if err != nil {
			fail("SET filler %d: %v", n, err)
		}
	}
	used, err := c.usedMemory()
	if err != nil {
		fail("%v", err)
	}
	lowered := used - fillMargin
	if lowered < fillMargin {
		fail("used_memory %d is too small to lower maxmemory %d below it; start the server with a larger --maxmemory", used, limit)
	}
	if _, err := c.do("CONFIG", "SET", "maxmemory", strconv.FormatInt(lowered, 10)); err != nil {
		fail("CONFIG SET maxmemory %d: %v", lowered, err)
	}
	if _, err := c.do("SET", FillPrefix+"probe", "x"); !isOOM(err) {
		fail("a small SET on the full server answered %v, want -OOM", err)
	}
	t.Logf("valkeytest: %s is full: %d filler values of %d bytes, used_memory %d, maxmemory %d lowered to %d",
		s.Addr(), n, fillChunk, used, limit, lowered)
	var once sync.Once
	return func() {
		once.Do(func() {
			defer c.Close()
			keys := []string{"DEL"}
			for i := range n {
				keys = append(keys, FillPrefix+strconv.Itoa(i))
			}
			if _, err := c.do(keys...); err != nil {
				t.Errorf("valkeytest: freeing %s: DEL filler keys: %v", s.Addr(), err)
				return
			}
			if _, err := c.do("CONFIG", "SET", "maxmemory", strconv.FormatInt(limit, 10)); err != nil {
				t.Errorf("valkeytest: freeing %s: CONFIG SET maxmemory %d: %v", s.Addr(), limit, err)
			}
		})
	}
}

// serverError is an error reply (-ERR ..., -OOM ...) from the server.
type serverError string

func (e serverError) Error() string { return string(e) }

// isOOM reports whether err is the server's -OOM refusal.
func isOOM(err error) bool {
	var se serverError
	return errors.As(err, &se) && strings.HasPrefix(string(se), "OOM ")
}

// respConn is a minimal RESP2 connection for Fill, which writes values too
// large for a valkey-cli argument.
type respConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	return &respConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// do sends one command and reads its reply: a simple string, integer or
// bulk string as one element, an array as its elements (nested arrays
// flattened), an error reply as a serverError.
func (c *respConn) do(args ...string) ([]string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.Conn, b.String()); err != nil {
		return nil, err
	}
	return c.reply()
}

func (c *respConn) reply() ([]string, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return []string{line[1:]}, nil
	case '-':
		return nil, serverError(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return []string{string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		var out []string
		for range n {
			v, err := c.reply()
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// usedMemory returns used_memory from INFO memory.
func (c *respConn) usedMemory() (int64, error) {
	v, err := c.do("INFO", "memory")
	if err != nil || len(v) != 1 {
		return 0, fmt.Errorf("INFO memory: %q, %v", v, err)
	}
	for _, line := range strings.Split(v[0], "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(n, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}

// linkTimeout bounds how long StartReplica waits for the replication link.
const linkTimeout = 20 * time.Second

// StartReplica starts a valkey-server that replicates primaryAddr
// ("host:port": the primary itself, or a relay in front of it), waits until
// its link to the primary is up (INFO replication master_link_status:up)
// and stops it in t.Cleanup. opts apply as for Start.
func StartReplica(t testing.TB, primaryAddr string, opts ...Option) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(primaryAddr)
	if err != nil {
		t.Fatalf("valkeytest: replica of %q: %v", primaryAddr, err)
	}
	r := Start(t, append(opts, WithArgs("--replicaof", host, port))...)
	r.WaitLinkUp(linkTimeout)
	return r
}

// WaitLinkUp waits up to d until the server, a replica, reports
// master_link_status:up, and fails the test otherwise.
func (s *Server) WaitLinkUp(d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		out, err := s.CLI("INFO", "replication")
		if err == nil && strings.Contains(out, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("valkeytest: replica %s: link to its primary not up after %v: %v\n%s", s.Addr(), d, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CommandCalls parses the text of INFO commandstats into the calls per
// command name ("evalsha", subcommands as "client|caching"; commands run
// inside scripts count too). Lines it does not know are skipped.
func CommandCalls(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}
