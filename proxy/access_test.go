package proxy_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/logdigest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// accessLines returns the "request" lines of h's JSON log.
func accessLines(t *testing.T, h *harness) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(h.logText(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// TestAccessLog: one line per request, enforced or not, with the fields
// README.md lists; a keyed request whose upstream cannot be reached carries
// the cause (the err field); NoAccessLog turns the lines off.
func TestAccessLog(t *testing.T) {
	h := newHarness(t, created)
	h.do("POST", "/v1/orders/%7Bx%7D", "alice", "k1", "{}")
	h.do("GET", "/v1/orders", "alice", "", "")
	// The line is written when the handler returns, which may be just
	// after the client read the whole response.
	lines := accessLines(t, h)
	for deadline := time.Now().Add(5 * time.Second); len(lines) < 2 && time.Now().Before(deadline); lines = accessLines(t, h) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(lines) != 2 {
		t.Fatalf("%d access lines, want 2:\n%s", len(lines), h.logText())
	}
	enf, pass := lines[0], lines[1]
	for k, want := range map[string]any{"method": "POST", "path": "/v1/orders/%7Bx%7D", "route": "default", "outcome": "forwarded",
		"status": float64(201), "key_hash": logdigest.OfIdentity("h:alice", "default", "k1")} {
		if enf[k] != want {
			t.Errorf("enforced line %s = %v, want %v (%v)", k, enf[k], want, enf)
		}
	}
	for _, k := range []string{"bytes", "duration_ms", "upstream_ms"} {
		if _, ok := enf[k]; !ok {
			t.Errorf("enforced line lacks %s: %v", k, enf)
		}
	}
	if enf["bytes"].(float64) <= 0 {
		t.Errorf("bytes %v", enf["bytes"])
	}
	if pass["outcome"] != "passthrough" || pass["status"] != float64(201) || pass["bytes"].(float64) <= 0 || pass["key_hash"] != nil {
		t.Errorf("passthrough line %v", pass)
	}

	dead := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
		o.Upstream, _ = url.Parse("http://127.0.0.1:1")
	})
	dead.do("POST", "/v1/orders", "alice", "k1", "{}")
	lines = accessLines(t, dead)
	if len(lines) != 1 || lines[0]["outcome"] != "upstream_error" || !strings.Contains(lines[0]["err"].(string), "connection refused") {
		t.Fatalf("upstream failure line: %v", lines)
	}

	off := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) { o.NoAccessLog = true })
	off.do("POST", "/v1/orders", "alice", "k1", "{}")
	if lines := accessLines(t, off); len(lines) != 0 {
		t.Errorf("access lines with NoAccessLog: %v", lines)
	}
}
