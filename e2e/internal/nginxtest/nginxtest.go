// Package nginxtest runs a throwaway nginx in the foreground for the
// benchmark's target N (e2e/bench) and the e2e test of docs/nginx.md: its
// own prefix, temporary directories, pid and error log under one directory,
// listening on a loopback port the caller chose, stopped with its workers.
package nginxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/e2e/internal/aptget"
)

// InstallHint is the error text when nginx is missing.
const InstallHint = "nginx not found on PATH or in /usr/sbin: install it (Debian 12: apt-get install nginx-light, or scripts/install-nginx.sh)"

// Find returns the path of the nginx binary: on PATH, else /usr/sbin/nginx
// (Debian installs it there, which a non-root PATH often lacks).
func Find() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat("/usr/sbin/nginx"); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return "/usr/sbin/nginx", nil
	}
	return "", errors.New(InstallHint)
}

// Install installs nginx with apt-get when it is missing (Debian's
// nginx-light, else nginx; through sudo when not root), writing apt's
// output to log, and returns its path. It never touches a registry other
// than the apt sources already configured on the machine.
func Install(ctx context.Context, log io.Writer) (string, error) {
	if p, err := Find(); err == nil {
		return p, nil
	}
	apt, err := aptget.New(ctx, log, InstallHint)
	if err != nil {
		return "", err
	}
	if err := apt.Install("nginx-light"); err != nil {
		if err := apt.Install("nginx"); err != nil {
			return "", fmt.Errorf("apt-get install nginx: %w; %s", err, InstallHint)
		}
	}
	// The package may start the system service on :80 (unless the machine
	// forbids it); nothing here uses it.
	_ = apt.Run("sh", "-c", "systemctl disable --now nginx >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true")
	return Find()
}

// Options describe one nginx.
type Options struct {
	// Bin is the nginx binary (Find).
	Bin string
	// Dir is a directory of its own: prefix, nginx.conf, pid file, error
	// log and the temporary directories go there.
	Dir string
	// Workers is worker_processes (0: 1).
	Workers int
	// Listen is the host:port nginx listens on, which HTTP must use; Start
	// waits until it accepts connections.
	Listen string
	// HTTP is the inside of the http block after the common directives
	// (access log off, temporary paths): upstream and server blocks.
	HTTP string
}

// Server is a running nginx: the master process in the foreground (daemon
// off) and its workers.
type Server struct {
	// Cmd is the master process.
	Cmd *exec.Cmd
	// Log is the path of the error log (the master's stderr too).
	Log string
	// Conf is the path of the nginx.conf written for it.
	Conf   string
	exited chan struct{}
}

// Exited is closed when the master process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Config returns the whole nginx.conf for o.
//
// Workers run as root when the caller is root (`user root;`): the
// directories are under a 0700 temporary directory of the caller's, and
// nginx's default worker user (nobody) could not write its temporary files
// there (request bodies over client_body_buffer_size, buffered responses).
// Making the tree world-writable would work too but is worse on a shared
// machine; a loopback-only throwaway server gains nothing from dropping
// privileges, and the workers' speed does not depend on their user. As any
// other user nginx cannot switch users and the workers run as the caller.
func Config(o Options) string {
	tmp := filepath.Join(o.Dir, "tmp")
	var b strings.Builder
	fmt.Fprintf(&b, "daemon off;\nmaster_process on;\nworker_processes %d;\npid %s;\nerror_log %s warn;\n",
		max(1, o.Workers), filepath.Join(o.Dir, "nginx.pid"), filepath.Join(o.Dir, "error.log"))
	if os.Geteuid() == 0 {
		b.WriteString("user root;\n")
	}
	b.WriteString("events {\n    worker_connections 8192;\n}\n")
	b.WriteString("http {\n    access_log off;\n")
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s;\n", d, filepath.Join(tmp, d))
	}
	b.WriteString(o.HTTP)
	b.WriteString("\n}\n")
	return b.String()
}

// Start writes Config(o) to o.Dir/nginx.conf, checks it (nginx -t), starts
// nginx in the foreground and waits until o.Listen accepts connections.
// Stop it with Stop.
func Start(ctx context.Context, o Options) (*Server, error) {
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, "tmp", d), 0o700); err != nil {
			return nil, err
		}
	}
	s := &Server{Conf: filepath.Join(o.Dir, "nginx.conf"), Log: filepath.Join(o.Dir, "error.log"), exited: make(chan struct{})}
	if err := os.WriteFile(s.Conf, []byte(Config(o)), 0o600); err != nil {
		return nil, err
	}
	// -e: the error log before the config is read (the default path is
	// the system's).
	args := []string{"-p", o.Dir, "-c", s.Conf, "-e", s.Log}
	if out, err := exec.CommandContext(ctx, o.Bin, append(args, "-t", "-q")...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v: %s\n%s", err, out, s.Conf)
	}
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so Stop reaches the workers even when the
	// master is gone; PDEATHSIG ends the master with the caller (the
	// master then stops its workers only if it gets to run: a SIGKILLed
	// caller can leave workers behind, which Stop cannot prevent).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	s.Cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(s.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", o.Listen, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("nginx exited at start: %s", s.tail())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("nginx did not accept connections on %s within 20s: %v: %s", o.Listen, err, s.tail())
		}
	}
}

// tail returns the end of the error log, for an error message.
func (s *Server) tail() string {
	b, _ := os.ReadFile(s.Log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Sprintf("%s (log %s)", strings.TrimSpace(string(b)), s.Log)
}

// PIDs returns the master's pid and those of its children (the workers),
// read from /proc.
func (s *Server) PIDs() []int {
	master := s.Cmd.Process.Pid
	pids := []int{master}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == master {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which may hold spaces: state, ppid.
		st := string(b)
		if i := strings.LastIndexByte(st, ')'); i >= 0 {
			if f := strings.Fields(st[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(master) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// Stop ends nginx: SIGTERM to the master (fast shutdown: it stops its
// workers, waits for them and exits), and SIGKILL to its whole process
// group, workers included, if it has not exited after 5 s. It is safe to
// call more than once.
func (s *Server) Stop() {
	if s == nil || s.Cmd == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return
	case <-time.After(5 * time.Second):
	}
	// The master still runs, so the group is still ours.
	_ = syscall.Kill(-s.Cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// DocMarker precedes, in docs/nginx.md, the fenced nginx block that the
// split deployment runs (e2e's TestNginxSendsOnlyKeyedWritesToIdemgate and
// the bench's target S), so what the document shows is what is measured.
const DocMarker = "<!-- nginx-snippet:"

// DocSplit returns the http-block configuration of the split deployment
// of the document at docPath (docs/nginx.md): its block after DocMarker
// with idemgate's and the API's addresses (host:port) and nginx's listen
// address put in place of the document's three placeholders
// ("server 127.0.0.1:8080;", "server 127.0.0.1:3000;", "listen 80;"). It
// returns an error when the document has no such block or a placeholder
// is missing or repeated (the document changed its shape).
func DocSplit(docPath, idemgate, api, listen string) (string, error) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(b), DocMarker)
	if !ok {
		return "", fmt.Errorf("%s has no %q marker before its configuration block", docPath, DocMarker)
	}
	if _, rest, ok = strings.Cut(rest, "```nginx\n"); !ok {
		return "", fmt.Errorf("%s: no ```nginx block after the marker", docPath)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		return "", fmt.Errorf("%s: the ```nginx block after the marker is not closed", docPath)
	}
	for _, r := range [][2]string{
		{"server 127.0.0.1:8080;", "server " + idemgate + ";"},
		{"server 127.0.0.1:3000;", "server " + api + ";"},
		{"listen 80;", "listen " + listen + ";"},
	} {
		if n := strings.Count(block, r[0]); n != 1 {
			return "", fmt.Errorf("%s's block holds %q %d times, want once", docPath, r[0], n)
		}
		block = strings.Replace(block, r[0], r[1], 1)
	}
	return block, nil
}
