package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// send delivers sig to the gate's process without waiting for it to exit.
func (g *Gate) send(sig syscall.Signal) {
	g.t.Helper()
	g.mu.Lock()
	cmd := g.cmd
	g.mu.Unlock()
	if cmd == nil {
		g.t.Fatal("no idemgate process to signal")
	}
	if err := cmd.Process.Signal(sig); err != nil {
		g.t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitExit waits up to d for the process to exit and returns its exit code
// and when its exit was seen; it fails t when the process is still running.
func (g *Gate) waitExit(d time.Duration) (int, time.Time) {
	g.t.Helper()
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(d):
		g.t.Fatalf("idemgate still running %v after SIGTERM", d)
	}
	at := time.Now()
	return cmd.ProcessState.ExitCode(), at
}

// shortWait is an edit for startGateWith that lowers the defaults'
// wait_timeout to 2s, so that an upstream.timeout of a few seconds is valid
// (wait_timeout must not exceed it).
func shortWait(doc string) string {
	return strings.Replace(doc, "wait_timeout: 10s", "wait_timeout: 2s", 1)
}

// metricLines returns the lines of the gate's /metrics.
func metricLines(t *testing.T, g *Gate) []string {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	return lines
}

// metricValue returns the value of the sample line that starts with series
// (e.g. `idemgate_config_reloads_total{result="success"}`) on the gate's
// /metrics, or -1 when there is no such line.
func metricValue(t *testing.T, g *Gate, series string) float64 {
	t.Helper()
	for _, line := range metricLines(t, g) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, rest)
			}
			return v
		}
	}
	return -1
}
