package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// exportedSpan is a span as OpenTelemetry's console exporter writes it
// (one JSON object per line).
type exportedSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// TestCaddyStoreSpansUnderCaddysTracing: with Caddy's tracing directive,
// the store calls of a keyed request are spans (store.claim,
// store.complete) under Caddy's own request span, exported by Caddy's
// exporter (here the console one), and that span carries idemgate.route,
// as the standalone proxy's request span does.
func TestCaddyStoreSpansUnderCaddysTracing(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export soon after the request
	up := startUpstream(t)
	c := runCaddy(t, caddySite{
		YAML:  "store: {driver: memory}\n" + noStoreYAML + "routes:\n  - name: orders\n    match: \"POST /\"\n",
		After: "tracing {\n\t\tspan api\n\t}\n\treverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	})
	if a := post(t, c.URL, "alice", "k-trace", `{"amount":1}`); a.Status != http.StatusCreated {
		t.Fatalf("keyed request: %d %s\n%s", a.Status, a.Body, c.out.String())
	}
	var server exportedSpan
	var store []exportedSpan
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		server, store = exportedSpan{}, nil
		sc := bufio.NewScanner(strings.NewReader(c.out.String()))
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			var s exportedSpan
			if json.Unmarshal(sc.Bytes(), &s) != nil || s.SpanContext.SpanID == "" {
				continue // a log line
			}
			switch {
			case s.Name == "api":
				server = s
			case strings.HasPrefix(s.Name, "store."):
				store = append(store, s)
			}
		}
		if server.Name != "" && len(store) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: request span %q, %d store spans; want Caddy's span and store.claim, store.complete under it:\n%s", server.Name, len(store), c.out.String())
		}
	}
	names := map[string]bool{}
	for _, s := range store {
		names[s.Name] = true
		if s.Parent.SpanID != server.SpanContext.SpanID {
			t.Errorf("%s's parent is %s, not Caddy's request span %s", s.Name, s.Parent.SpanID, server.SpanContext.SpanID)
		}
	}
	if !names["store.claim"] || !names["store.complete"] {
		t.Errorf("store spans %v; want store.claim and store.complete", names)
	}
	route := ""
	for _, a := range server.Attributes {
		if a.Key == "idemgate.route" {
			route, _ = a.Value.Value.(string)
		}
	}
	if route != "orders" {
		t.Errorf("Caddy's request span: idemgate.route %q, want orders", route)
	}
}
