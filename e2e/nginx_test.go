package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/e2e/internal/nginxtest"
	"github.com/idemgate/idemgate/internal/needs"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// requestsTotal sums idemgate_requests_total over every route and outcome
// on the gate's /metrics, and returns the passthrough ones apart.
func requestsTotal(t *testing.T, g *Gate) (all, passthrough float64) {
	t.Helper()
	for _, line := range metricLines(t, g) {
		if !strings.HasPrefix(line, "idemgate_requests_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		all += v
		if strings.Contains(line, `outcome="passthrough"`) {
			passthrough += v
		}
	}
	return all, passthrough
}

// TestNginxSendsOnlyKeyedWritesToIdemgate runs the configuration of
// docs/nginx.md in a real nginx in front of a real idemgate and a counting
// API: keyed POSTs and PATCHes go through idemgate (the retry is a replay,
// the API runs each once); GETs (keyed or not), a keyed PUT and unkeyed
// POSTs go straight to the API, so idemgate counts none of them; nginx
// refuses a lower-case "post" itself.
func TestNginxSendsOnlyKeyedWritesToIdemgate(t *testing.T) {
	bin, err := nginxtest.Find()
	if err != nil {
		needs.Missing(t, "nginx", err.Error()) // says how to install nginx; skipped only under -short
	}
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL})
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	upURL, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The block docs/nginx.md shows, so the two cannot drift apart.
	conf, err := nginxtest.DocSplit("../docs/nginx.md", strings.TrimPrefix(g.URL, "http://"), upURL.Host, listen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := nginxtest.Start(ctx, nginxtest.Options{Bin: bin, Dir: t.TempDir(), Workers: 1, Listen: listen, HTTP: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	base := "http://" + listen

	send := func(method, path, owner, key, body string) Answer {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", owner)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s through nginx: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}

	// Keyed writes: through idemgate, once each, the retry replayed.
	enforced := 0
	for _, method := range []string{"POST", "PATCH"} {
		key := `"nginx-` + strings.ToLower(method) + `"`
		first := send(method, "/v1/orders", "alice", key, `{"amount":1}`)
		retry := send(method, "/v1/orders", "alice", key, `{"amount":1}`)
		enforced += 2
		if first.Status != http.StatusCreated || first.replayed() {
			t.Errorf("keyed %s: %d replayed=%v %s, want 201 from the API", method, first.Status, first.replayed(), first.Body)
		}
		if retry.Status != http.StatusCreated || !retry.replayed() || string(retry.Body) != string(first.Body) {
			t.Errorf("keyed %s retried: %d replayed=%v %s, want the replay of %s", method, retry.Status, retry.replayed(), retry.Body, first.Body)
		}
		if n := up.Calls("alice", key); n != 1 {
			t.Errorf("keyed %s: the API ran it %d times, want 1", method, n)
		}
	}
	all, _ := requestsTotal(t, g)
	if all != float64(enforced) {
		t.Fatalf("idemgate counted %v requests after %d keyed writes, want %d", all, enforced, enforced)
	}

	// Everything else: straight to the API, never through idemgate.
	direct := []struct{ method, key string }{
		{"GET", ""}, {"GET", `"nginx-get"`}, {"POST", ""}, {"POST", ""}, {"PATCH", ""}, {"PUT", `"nginx-put"`},
	}
	before := up.Total()
	for _, d := range direct {
		a := send(d.method, "/v1/orders", "bob", d.key, `{"amount":2}`)
		if a.Status != http.StatusCreated || a.replayed() {
			t.Errorf("%s key=%q: %d replayed=%v %s, want the API's 201", d.method, d.key, a.Status, a.replayed(), a.Body)
		}
	}
	// The unkeyed POST sent twice ran twice: nothing deduplicated it.
	if got := up.Total() - before; got != len(direct) {
		t.Errorf("the API ran %d of the %d requests that skip idemgate, want all", got, len(direct))
	}
	// A method in lower case: nginx refuses it itself, so it cannot slip
	// past the map's upper-case POST.
	if a := send("post", "/v1/orders", "bob", `"nginx-lower"`, `{"amount":3}`); a.Status != http.StatusBadRequest {
		t.Errorf("keyed post in lower case: %d %s, want nginx's 400", a.Status, a.Body)
	}
	if got := up.Total() - before; got != len(direct) {
		t.Errorf("the lower-case post reached the API")
	}
	all, passthrough := requestsTotal(t, g)
	if all != float64(enforced) || passthrough != 0 {
		t.Errorf("idemgate counted %v requests (%v passthrough) after %d keyed writes and %d other requests, want only the %d keyed ones",
			all, passthrough, enforced, len(direct), enforced)
	}
}
