package main

import (
	"bytes"
	"context"
	"errors"
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
	"syscall"
	"time"
)

// proc is one child process the benchmark started; every proc is stopped by
// procs.stopAll, also when the run is interrupted.
type proc struct {
	name   string
	cmd    *exec.Cmd
	addr   string // host:port it serves on
	admin  string // idemgate's admin base URL (http://host:port), "" for the others
	log    string // path of its stdout/stderr file
	exited chan struct{}
	// tree, when set, returns the pids of every process of the target (an
	// nginx master and its workers); its CPU, memory and descriptors are
	// the sum over them.
	tree func() []int
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// pids returns the processes whose CPU and memory are the target's.
func (p *proc) pids() []int {
	if p.tree != nil {
		return p.tree()
	}
	return []int{p.pid()}
}

// cpu returns the user+system CPU seconds of p's processes.
func (p *proc) cpu() (float64, error) {
	var sum float64
	for i, pid := range p.pids() {
		s, err := cpuSeconds(pid)
		if err != nil && i == 0 {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// memKB returns the sum of the /proc/PID/status field over p's processes
// (for VmHWM an upper bound of the peak of several processes together).
func (p *proc) memKB(field string) (int64, error) {
	var sum int64
	for i, pid := range p.pids() {
		kb, err := memKB(pid, field)
		if err != nil && i == 0 {
			return 0, err
		}
		sum += kb
	}
	return sum, nil
}

// resetPeak resets VmHWM of p's processes.
func (p *proc) resetPeak() {
	for _, pid := range p.pids() {
		_ = resetPeak(pid)
	}
}

// fds returns the open file descriptors of p's processes.
func (p *proc) fds() int {
	n := 0
	for _, pid := range p.pids() {
		n += max(0, countFDs(pid))
	}
	return n
}

// stop sends SIGTERM to p and waits for it to exit, sending SIGKILL after
// 5 s; stopAll later skips it. For a process the benchmark stops before
// its end (the waiters workload's own instances).
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// procs tracks started processes so none outlives the benchmark.
type procs struct {
	mu  sync.Mutex
	all []*proc
	dir string
}

// start runs bin with args, output to dir/name.log. When addrFromStdout is
// true the process prints its listen address as the first stdout line.
func (ps *procs) start(name, bin string, args []string, addrFromStdout bool) (*proc, error) {
	return ps.startEnv(name, bin, args, nil, addrFromStdout)
}

// startEnv is start with env (KEY=value) added to the benchmark's own
// environment.
func (ps *procs) startEnv(name, bin string, args, env []string, addrFromStdout bool) (*proc, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the benchmark
	fl := &firstLine{w: logf, line: make(chan string, 1)}
	cmd.Stdout = fl
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	if addrFromStdout {
		select {
		case p.addr = <-fl.line:
		case <-p.exited:
			return nil, fmt.Errorf("%s exited before printing its address (log %s)", name, logPath)
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("%s printed no address within 10s (log %s)", name, logPath)
		}
	}
	return p, nil
}

// firstLine passes a child's stdout to w and hands its first line over.
type firstLine struct {
	w    io.Writer
	buf  []byte
	sent bool
	line chan string
}

func (f *firstLine) Write(b []byte) (int, error) {
	if !f.sent {
		f.buf = append(f.buf, b...)
		if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
			f.line <- strings.TrimSpace(string(f.buf[:i]))
			f.sent = true
		}
	}
	return f.w.Write(b)
}

// stopAll sends SIGTERM to every process still running, then SIGKILL to
// those that have not exited after 5 s.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	all := ps.all
	ps.all = nil
	ps.mu.Unlock()
	for _, p := range all {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range all {
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP polls url until it answers 200, p exits or ctx ends.
func waitHTTP(ctx context.Context, p *proc, url string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited at start (log %s)", p.name, p.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer 200 within 20s: %v (log %s)", p.name, url, err, p.log)
		}
	}
}

// clockTick is USER_HZ, the unit of utime/stime in /proc/PID/stat; it is
// 100 on every Linux architecture Go supports.
const clockTick = 100

// cpuSeconds returns the user+system CPU time of pid in seconds
// (/proc/PID/stat fields 14 and 15, see proc(5)).
func cpuSeconds(pid int) (float64, error) { return statSeconds(pid, 11) }

// childCPUSeconds returns the user+system CPU time of the children pid has
// waited for, in seconds (/proc/PID/stat fields 16 and 17).
func childCPUSeconds(pid int) (float64, error) { return statSeconds(pid, 13) }

// statSeconds adds the two clock-tick fields of /proc/PID/stat at index i
// and i+1 of the fields after the command name, in seconds.
func statSeconds(pid, i int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields restart after ')'.
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(s[j+1:])
	if len(f) < i+2 {
		return 0, errors.New("short /proc/PID/stat")
	}
	ut, err1 := strconv.ParseInt(f[i], 10, 64)
	st, err2 := strconv.ParseInt(f[i+1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTick, nil
}

// memKB returns a "Vm..." field of /proc/PID/status in KiB (VmRSS: resident
// now, VmHWM: peak resident since start or the last resetPeak).
func memKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

// resetPeak resets VmHWM to the current RSS (writing 5 to clear_refs, Linux
// >= 4.0, proc(5)), so each phase reports its own peak.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// hostJiffies returns the machine's busy (all but idle and iowait) and total
// CPU time from the first line of /proc/stat, in clock ticks.
func hostJiffies() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, errors.New("malformed /proc/stat")
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if i >= 8 { // guest time is already counted in user and nice
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}
