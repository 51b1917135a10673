// Package pgtest starts throwaway PostgreSQL servers on loopback ports for tests, as the unprivileged postgres user when run as root.
//
// Every server this package starts binds 127.0.0.1 only (no Unix socket),
// keeps its data in a fresh directory under the system temp dir, trusts
// every local connection (user postgres, no password) and is stopped in
// t.Cleanup. The binaries (initdb, postgres) come from `pg_config --bindir`,
// else the highest /usr/lib/postgresql/*/bin (Debian), else PATH. When they
// are missing the test fails (never skips) and names scripts/test.sh, which
// installs them.
//
// initdb and postgres refuse to run as root. When the test runs as root (as
// CI does), both run as the `postgres` system user that the Debian package
// creates (setuid through SysProcAttr.Credential): the data directory is
// chowned to it, and its parent is a directory of mode 0755 under the
// system temp dir (t.TempDir is 0700 and root's, so postgres could not
// reach it). Run as any other user, the server runs as that user.
//
// Programs without a testing.TB (the load benchmark e2e/bench) start the
// same server with Launch, which returns an error and a stop function
// instead of failing a test and registering a cleanup.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
	"github.com/jackc/pgx/v5"
)

// installHint ends the t.Fatal raised when the server binaries are missing.
const installHint = "run scripts/test.sh, which installs them with scripts/install-postgres.sh (Debian 12: apt-get install -y postgresql)"

// startTimeout bounds how long a start waits for the server to accept
// connections.
const startTimeout = 30 * time.Second

// stopTimeout bounds how long Stop waits after SIGINT before SIGKILL.
const stopTimeout = 10 * time.Second

// Option configures Start.
type Option func(*config)

type config struct {
	fsync     bool
	settings  [][2]string
	pdeathsig bool // SIGKILL the postmaster when the starting thread's process dies (Launch)
}

// WithFsync makes the server durable: fsync, synchronous_commit and
// full_page_writes on (the PostgreSQL defaults), so every committed
// statement survives Kill followed by Start. Without it they are off, for
// speed.
func WithFsync() Option { return func(c *config) { c.fsync = true } }

// WithSetting passes `-c name=value` to the server, after the defaults.
func WithSetting(name, value string) Option {
	return func(c *config) { c.settings = append(c.settings, [2]string{name, value}) }
}

// Server is one PostgreSQL server (postmaster and its backends) on
// 127.0.0.1. Its methods are safe for concurrent use.
type Server struct {
	t         testing.TB // nil for a server from Launch: its test-failing methods panic
	bin       string
	dir       string // data directory
	log       string // server log file
	port      int
	args      []string
	cred      *syscall.Credential
	pdeathsig bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// BinDir returns the directory holding initdb and postgres, or fails the
// test with install instructions (skips it under -short).
func BinDir(t testing.TB) string {
	t.Helper()
	d, err := binDir()
	if err != nil {
		needs.Missing(t, "PostgreSQL (initdb, postgres)", err.Error())
	}
	return d
}

func binDir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
		candidates = append(candidates, dirs...)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, d := range candidates {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgtest: PostgreSQL server binaries (initdb, postgres) not found (tried %q): %s", candidates, installHint)
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start initializes a cluster in a fresh directory, starts it on a free
// 127.0.0.1 port, waits until it accepts connections and stops it (and
// removes the directory) in t.Cleanup. Without the server binaries it
// fails the test with install instructions (skips it under -short).
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	BinDir(t)
	var c config
	for _, o := range opts {
		o(&c)
	}
	s, stop, err := launch(c)
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(stop)
	return s
}

// Launch is Start for programs without a testing.TB, such as the load
// benchmark: it starts the same server and returns it with stop, which
// shuts it down and removes its directory (safe to call more than once;
// call it on every path). logf receives where the server keeps its data
// and log. The postmaster also gets SIGKILL if the calling process dies
// without calling stop (PR_SET_PDEATHSIG). The methods that fail a test
// (Start, Restart, Exec, ExecIn, CreateDatabase, Terminate) panic on a
// server from Launch; use QueryInt, DSN, PIDs and the like.
func Launch(logf func(format string, args ...any), opts ...Option) (s *Server, stop func(), err error) {
	c := config{pdeathsig: true}
	for _, o := range opts {
		o(&c)
	}
	if s, stop, err = launch(c); err != nil {
		return nil, nil, err
	}
	logf("pgtest: PostgreSQL on 127.0.0.1:%d, data in %s, log %s", s.port, s.dir, s.log)
	return s, stop, nil
}

// launch initializes and starts a server; stop stops it and removes its
// directory. On error nothing is left behind.
func launch(c config) (_ *Server, stop func(), err error) {
	bin, err := binDir()
	if err != nil {
		return nil, nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, nil, err
	}
	base, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, nil, fmt.Errorf("pgtest: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(base)
		}
	}()
	// Traversable by the postgres user; the data directory itself is 0700.
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, nil, fmt.Errorf("pgtest: %w", err)
	}
	dir := filepath.Join(base, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("pgtest: %w", err)
	}
	logPath := filepath.Join(base, "postgres.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		return nil, nil, fmt.Errorf("pgtest: %w", err)
	}
	if cred != nil {
		for _, p := range []string{dir, logPath} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, nil, fmt.Errorf("pgtest: chown %s to the postgres user: %w", p, err)
			}
		}
	}
	initArgs := []string{"-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if !c.fsync {
		initArgs = append(initArgs, "--no-sync")
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), initArgs...)
	cmd.Dir = base
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	fsync := "off"
	if c.fsync {
		fsync = "on"
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	s := &Server{bin: bin, dir: dir, log: logPath, port: port, cred: cred, pdeathsig: c.pdeathsig}
	s.args = []string{"-D", dir, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "fsync=" + fsync,
		"-c", "synchronous_commit=" + fsync,
		"-c", "full_page_writes=" + fsync,
		"-c", "log_min_messages=warning",
	}
	for _, kv := range c.settings {
		s.args = append(s.args, "-c", kv[0]+"="+kv[1])
	}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, nil, err
	}
	var once sync.Once
	return s, func() {
		once.Do(func() {
			s.Stop()
			_ = os.RemoveAll(base)
		})
	}, nil
}

// credential returns the postgres user's credential when running as root,
// else nil (run as the current user).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and initdb refuses root, but there is no postgres user to run the server as (%v): %s", err, installHint)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// fatalf fails the test of a server from Start, and panics for a server
// from Launch (which has no test to fail).
func (s *Server) fatalf(format string, args ...any) {
	if s.t == nil {
		panic(fmt.Sprintf(format, args...))
	}
	s.t.Helper()
	s.t.Fatalf(format, args...)
}

// Start starts the server again after Stop or Kill (same port, data and
// settings) and waits until it accepts connections; a running server is
// left alone.
func (s *Server) Start() {
	if s.t != nil {
		s.t.Helper()
	}
	if err := s.start(); err != nil {
		s.fatalf("%v", err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logFile, err := os.OpenFile(s.log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), s.args...)
	cmd.Dir = filepath.Dir(s.dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so a Ctrl-C of the test does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	if s.pdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(s.DSN())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: server on port %d not ready within %v: %w\n%s", s.port, startTimeout, err, s.LogTail())
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("pgtest: postgres exited during start:\n%s", s.LogTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// Stop shuts the server down (SIGINT: fast shutdown, SIGKILL to its process
// group after 10 s) and waits for it. Stopping a stopped server does
// nothing.
func (s *Server) Stop() { s.signalAndWait(syscall.SIGINT) }

// Kill ends every backend and the postmaster with SIGKILL (a crash: no
// checkpoint, no shutdown) and waits for the postmaster to exit. The
// next Start runs crash recovery from the WAL.
func (s *Server) Kill() { s.signalAndWait(syscall.SIGKILL) }

func (s *Server) signalAndWait(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	var killed []int
	if sig == syscall.SIGKILL {
		// Every backend calls setsid(), so a process-group signal would
		// miss them: freeze the postmaster (no new children), then kill
		// its children and itself.
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		killed = children(pid)
		for _, c := range killed {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	} else {
		s.signalAllLocked(syscall.SIGCONT) // in case it was paused
		_ = syscall.Kill(pid, sig)
	}
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		for _, c := range children(pid) {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-s.done
	}
	// The postmaster is reaped, but its killed backends, reparented, may
	// still hold the shared memory segment for a moment; a Start then
	// fails with "pre-existing shared memory block ... is still in use"
	// (seen under load in TestFaultKillKeepsCompletedRecords). Wait until
	// each has exited (a zombie has already released its memory).
	waitExited(killed, stopTimeout)
	s.cmd = nil
}

// waitExited waits, at most d, until every pid has exited: gone from /proc
// or a zombie.
func waitExited(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, p := range pids {
		for time.Now().Before(deadline) {
			b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "stat"))
			if err != nil {
				break
			}
			i := strings.LastIndexByte(string(b), ')')
			if f := strings.Fields(string(b[i+1:])); i >= 0 && len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// signalAllLocked sends sig to the postmaster and each of its children.
func (s *Server) signalAllLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	if sig == syscall.SIGSTOP {
		_ = syscall.Kill(pid, sig) // first, so it forks no child meanwhile
	}
	for _, c := range children(pid) {
		_ = syscall.Kill(c, sig)
	}
	_ = syscall.Kill(pid, sig)
}

// children returns the pids whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// Restart stops the server if it runs and starts it again.
func (s *Server) Restart() {
	if s.t != nil {
		s.t.Helper()
	}
	s.Stop()
	s.Start()
}

// Port returns the TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// PIDs returns the pid of the postmaster followed by those of its children
// (backends and background processes) at the time of the call, or nil
// when the server is not running.
func (s *Server) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	pid := s.cmd.Process.Pid
	return append([]int{pid}, children(pid)...)
}

// DSN returns a URL for user postgres on database postgres.
func (s *Server) DSN() string { return s.DatabaseDSN("postgres") }

// DatabaseDSN returns a URL for user postgres on database db.
func (s *Server) DatabaseDSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// UserDSN returns a URL for role user (password password) on database db.
func (s *Server) UserDSN(user, password, db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", user, password, s.port, db)
}

// Exec runs sql as the superuser on database postgres, failing the test on
// error.
func (s *Server) Exec(sql string, args ...any) {
	if s.t != nil {
		s.t.Helper()
	}
	s.ExecIn("postgres", sql, args...)
}

// ExecIn runs sql as the superuser on database db, failing the test on
// error.
func (s *Server) ExecIn(db, sql string, args ...any) {
	if s.t != nil {
		s.t.Helper()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DatabaseDSN(db))
	if err != nil {
		s.fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		s.fatalf("pgtest: %s: %v", sql, err)
	}
}

// QueryInt runs sql (returning one integer) as the superuser on database
// db.
func (s *Server) QueryInt(db, sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DatabaseDSN(db))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// CreateDatabase creates a database with a fresh name and returns its
// name.
func (s *Server) CreateDatabase() string {
	if s.t != nil {
		s.t.Helper()
	}
	name := fmt.Sprintf("db_%d", time.Now().UnixNano())
	s.Exec("CREATE DATABASE " + name)
	return name
}

// Terminate calls pg_terminate_backend on every backend of database db
// whose application_name is app (the postgres store names its listening
// connection "idemgate-listen"), and returns how many it terminated.
func (s *Server) Terminate(db, app string) int {
	if s.t != nil {
		s.t.Helper()
	}
	n, err := s.QueryInt("postgres", `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND application_name = $2 AND pid <> pg_backend_pid()`, db, app)
	if err != nil {
		s.fatalf("pgtest: terminate: %v", err)
	}
	return int(n)
}

// Pause freezes the postmaster and every backend (SIGSTOP): connections
// stay open and nothing is answered, like a stalled server. Stop, Kill and
// Resume continue it.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalAllLocked(syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalAllLocked(syscall.SIGCONT)
}

// LogTail returns the last 3000 bytes of the server log.
func (s *Server) LogTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// FreePort returns a 127.0.0.1 TCP port that was free at the time of the
// call.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: listen on 127.0.0.1:0: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
