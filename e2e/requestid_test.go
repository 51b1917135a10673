package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// accessLines returns the JSON access lines ("request") g has logged.
func accessLines(g *Gate) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(g.Logs(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// TestRequestIDAndAccessLogFields: an incoming X-Request-Id is kept
// (one that is not a short visible token is replaced), a request without
// one gets one; the upstream receives it, the access line logs it beside
// the client address (after trusted proxies) and the path with its query
// (without it under log.query: false), and a problem carries it as the
// extension member request_id. Before, none of this was there: the
// access line had no client address, no request id and no query.
func TestRequestIDAndAccessLogFields(t *testing.T) {
	up := startUpstream(t)
	var mu sync.Mutex
	seen := map[string]string{} // Idempotency-Key -> X-Request-Id upstream saw
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")] = r.Header.Get("X-Request-Id")
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}, 0, nil)
	send := func(url, key, reqID, xff, body string) Answer {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", key)
		if reqID != "" {
			req.Header.Set("X-Request-Id", reqID)
		}
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	lineFor := func(g *Gate, key string, status int) map[string]any {
		t.Helper()
		var found map[string]any
		eventually(t, 5*time.Second, "the access line of "+key, func() bool {
			for _, m := range accessLines(g) {
				if m["key_hash"] != nil && m["status"] == float64(status) && m["request_id"] != nil && strings.Contains(m["path"].(string), "/v1/orders") {
					if id, _ := m["request_id"].(string); id != "" {
						mu.Lock()
						want := seen[key]
						mu.Unlock()
						if status != 201 || id == want {
							found = m
						}
					}
				}
			}
			return found != nil
		})
		return found
	}

	g := startGate(t, gateConfig{Upstream: up.URL})
	if a := send(g.URL+"/v1/orders?tok=s3cret", "k1", "client-123", "", `{"n":1}`); a.Status != 201 {
		t.Fatalf("first: %v", a)
	}
	mu.Lock()
	got := seen["k1"]
	mu.Unlock()
	if got != "client-123" {
		t.Errorf("upstream got X-Request-Id %q, want the client's client-123", got)
	}
	m := lineFor(g, "k1", 201)
	if m["request_id"] != "client-123" || m["path"] != "/v1/orders?tok=s3cret" || m["remote_addr"] != "127.0.0.1" {
		t.Errorf("access line %v, want request_id client-123, the path with its query, remote_addr 127.0.0.1", m)
	}

	for _, c := range []struct{ key, sent string }{{"k2", ""}, {"k3", "bad id\twith spaces"}} {
		if a := send(g.URL+"/v1/orders", c.key, c.sent, "", `{"n":2}`); a.Status != 201 {
			t.Fatalf("%s: %v", c.key, a)
		}
		mu.Lock()
		id := seen[c.key]
		mu.Unlock()
		if id == "" || id == c.sent || strings.ContainsAny(id, " \t") {
			t.Errorf("%s (sent %q): upstream got X-Request-Id %q, want one idemgate made", c.key, c.sent, id)
		}
		if m := lineFor(g, c.key, 201); m["request_id"] != id {
			t.Errorf("%s: access line request_id %v, want the id the upstream got, %s", c.key, m["request_id"], id)
		}
	}

	// A problem carries the request id as an extension member.
	a := send(g.URL+"/v1/orders", "k1", "client-456", "", `{"n":99}`)
	var pd map[string]any
	if a.Status != 422 || json.Unmarshal(a.Body, &pd) != nil || pd["request_id"] != "client-456" {
		t.Errorf("key reused: %d %s, want 422 with request_id client-456", a.Status, a.Body)
	}

	// Behind a trusted proxy the client address is the one it names; with
	// log.query: false the query stays out of the log.
	g2 := startGateWith(t, gateConfig{Upstream: up.URL, Extra: "server:\n  trusted_proxies: [\"127.0.0.1\"]\n"}, func(doc string) string {
		return strings.Replace(doc, "  level: info\n", "  level: info\n  query: false\n", 1)
	})
	if a := send(g2.URL+"/v1/orders?tok=s3cret", "k4", "", "203.0.113.9", `{"n":4}`); a.Status != 201 {
		t.Fatalf("behind a trusted proxy: %v", a)
	}
	m = lineFor(g2, "k4", 201)
	if m["remote_addr"] != "203.0.113.9" || m["path"] != "/v1/orders" || strings.Contains(g2.Logs(), "s3cret") {
		t.Errorf("access line %v, want remote_addr 203.0.113.9 and the path without its query (log.query: false)", m)
	}
}
