package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAccessLinesBufferedNotLost: the access lines, buffered as nginx
// buffers its access log (internal/logbuf), reach stderr while idemgate
// runs, within the flush interval, one per request; and the lines of the
// requests answered just before a SIGTERM, still in the buffer then, are
// written before the process exits.
func TestAccessLinesBufferedNotLost(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL})
	lines := func() int { return strings.Count(g.Logs(), `"msg":"request"`) }
	for i := range 30 {
		if a := mustPost(t, g.URL+"/v1/orders", "alice", "running-"+strconv.Itoa(i), `{}`); a.Status != 201 {
			t.Fatalf("request %d: %d", i, a.Status)
		}
	}
	eventually(t, 5*time.Second, "30 access lines while running", func() bool { return lines() == 30 })
	for i := range 20 {
		if a := mustPost(t, g.URL+"/v1/orders", "alice", "last-"+strconv.Itoa(i), `{}`); a.Status != 201 {
			t.Fatalf("request %d: %d", i, a.Status)
		}
	}
	g.Stop()
	if n := lines(); n != 50 {
		t.Fatalf("%d access lines after exit, want 50 (one per request):\n%s", n, g.Logs())
	}
	if n := strings.Count(g.Logs(), `"outcome":"forwarded"`); n != 50 {
		t.Fatalf("%d lines with outcome forwarded, want 50:\n%s", n, g.Logs())
	}
}
