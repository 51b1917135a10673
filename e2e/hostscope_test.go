package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testcerts"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// With upstream.pass_host the host a request was sent to joins the key
// scope of routes whose pattern names none (default@t1.example), and every
// place that reads or changes a record must derive that scope the way the
// proxy does (identity.Scoping): the admin API and CLI, tombstones, and the
// host's canonical form, default port included.

// passHost turns upstream.pass_host on in a generated config.
func passHost(doc string) string {
	return strings.Replace(doc, "\nupstream:\n", "\nupstream:\n  pass_host: true\n", 1)
}

// sendHost sends one request with the given Host field, owner and key
// ("" sends none) and reads the whole answer.
func sendHost(t *testing.T, c *http.Client, method, url, host, owner, key, body string) Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", owner)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// TestAdminPurgesPerHostRecord: with pass_host the admin API and idemgate
// admin get|purge find a record by its host (host=, --host), so a key
// stuck on a route with on_abandoned: reject ("an operator must purge it")
// can be freed; a lookup without the host on such a route is a 400 that
// says the host is needed, and the record of the same owner and key on
// another host is untouched. Before, both looked in scope "default" only:
// the stuck record was 404 and could not be purged.
func TestAdminPurgesPerHostRecord(t *testing.T) {
	up := startUpstream(t)
	var slow atomic.Bool
	slow.Store(true)
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		// pass_host: the upstream sees the client's Host.
		if r.Host == "t1.example" && slow.Load() {
			time.Sleep(3 * time.Second) // past upstream.timeout: outcome unknown
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"host":%q}`, r.Host)
	}, 0, nil)
	g := startGateWith(t, gateConfig{Upstream: up.URL, UpTimeout: "1s", AdminToken: testAdminToken,
		Routes: "  - name: orders\n    match: \"POST /v1/orders\"\n    on_abandoned: reject\n    concurrent: conflict\n"},
		func(doc string) string {
			// A wait may not outlast upstream.timeout.
			return passHost(strings.Replace(doc, "  wait_timeout: 10s\n", "  wait_timeout: 1s\n", 1))
		})
	url := g.URL + "/v1/orders"

	if a := sendHost(t, http.DefaultClient, "POST", url, "t2.example", "alice", "k1", `{}`); a.Status != 201 || a.replayed() {
		t.Fatalf("alice's k1 on t2.example: %d %s", a.Status, a.Body)
	}
	if a := sendHost(t, http.DefaultClient, "POST", url, "t1.example", "alice", "k1", `{}`); a.Status != http.StatusGatewayTimeout {
		t.Fatalf("alice's k1 on t1.example past the upstream timeout: %d %s, want 504", a.Status, a.Body)
	}
	// Once the lease ends the claim is abandoned and, on_abandoned: reject,
	// every retry is refused until an operator purges the record.
	eventually(t, 10*time.Second, "the retry refused as outcome-unknown", func() bool {
		a := sendHost(t, http.DefaultClient, "POST", url, "t1.example", "alice", "k1", `{}`)
		return a.Status == http.StatusConflict && problemType(a.Body) == "outcome-unknown"
	})

	record := g.AdminURL + "/admin/records?route=orders&owner=h:alice&key=k1"
	a := adminDo(t, "GET", record, testAdminToken)
	if a.Status != 400 || !strings.Contains(string(a.Body), "missing query parameter: host") || !strings.Contains(string(a.Body), "pass_host") {
		t.Fatalf("GET without host on a pass_host route: %d %s, want 400 saying host is needed", a.Status, a.Body)
	}
	if a := adminDo(t, "GET", record+"&host=t1.example", testAdminToken); a.Status != 200 ||
		!strings.Contains(string(a.Body), `"scope":"default@t1.example"`) || !strings.Contains(string(a.Body), `"state":"abandoned"`) {
		t.Fatalf("GET host=t1.example: %d %s, want the abandoned record in scope default@t1.example", a.Status, a.Body)
	}
	cli := []string{"--admin-url", g.AdminURL, "--route", "orders", "--owner-value", "alice", "--key", "k1"}
	// The host as a client may have sent it: letter case and the default port.
	out, errOut, code := runAdmin(t, append([]string{"get", "--host", "T1.example:80"}, cli...)...)
	if code != 0 || !strings.Contains(out, `"scope":"default@t1.example"`) || !strings.Contains(out, `"state":"abandoned"`) {
		t.Fatalf("admin get --host T1.example:80: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code = runAdmin(t, append([]string{"get"}, cli...)...); code != 1 || !strings.Contains(errOut, "400") || !strings.Contains(errOut, "host") {
		t.Fatalf("admin get without --host: exit %d, want 1 with the 400 naming host\n%s", code, errOut)
	}
	out, errOut, code = runAdmin(t, append([]string{"purge", "--host", "t1.example"}, cli...)...)
	if code != 0 || strings.TrimSpace(out) != "purged" {
		t.Fatalf("admin purge --host t1.example: exit %d\n%s%s", code, out, errOut)
	}
	// Purged: the next retry runs once more, and answers.
	slow.Store(false)
	if a := sendHost(t, http.DefaultClient, "POST", url, "t1.example", "alice", "k1", `{}`); a.Status != 201 || a.replayed() {
		t.Fatalf("retry after the purge: %d replayed=%v %s, want a new run", a.Status, a.replayed(), a.Body)
	}
	// The record of t2.example, another tenant's, is untouched.
	if a := sendHost(t, http.DefaultClient, "POST", url, "t2.example", "alice", "k1", `{}`); a.Status != 201 || !a.replayed() || !strings.Contains(string(a.Body), "t2.example") {
		t.Fatalf("retry on t2.example after t1.example's purge: %d replayed=%v %s, want t2's replay", a.Status, a.replayed(), a.Body)
	}
	if n := up.Calls("alice", "k1"); n != 3 {
		t.Fatalf("upstream ran alice's k1 %d times, want 3 (t2 once, t1 before and after the purge)", n)
	}
}

// TestTombstonesPerHost: with pass_host and resource_from: location, a
// DELETE of a created resource tombstones the create's record in the
// host's scope, where the create stored and indexed it: the create's retry
// gets 410 resource-deleted and the upstream never sees it again, while
// the record of the same owner, key and path on another host still
// replays. Before, the tombstone was filed under the scope without the
// host: the retry replayed the old 201. On Valkey, so the replay cache
// sees the tombstone too.
func TestTombstonesPerHost(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	var deletes atomic.Int32
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Location", "/v1/orders/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"host":%q}`, r.Host)
	}, 0, nil)
	g := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, Routes: `  - name: orders
    match: "POST /v1/orders"
    retention: 1h
    resource_from: location
`}, passHost)
	url := g.URL + "/v1/orders"
	create := func(host string) Answer {
		t.Helper()
		return sendHost(t, http.DefaultClient, "POST", url, host, "alice", "create-1", `{"item":"book"}`)
	}
	for _, host := range []string{"t1.example", "t2.example"} {
		if a := create(host); a.Status != 201 || a.replayed() {
			t.Fatalf("create on %s: %d %s", host, a.Status, a.Body)
		}
		if a := create(host); a.Status != 201 || !a.replayed() {
			t.Fatalf("create's retry on %s: %d replayed=%v %s", host, a.Status, a.replayed(), a.Body)
		}
	}
	if a := sendHost(t, http.DefaultClient, "DELETE", g.URL+"/v1/orders/1", "t1.example", "alice", "", ""); a.Status != 204 || deletes.Load() != 1 {
		t.Fatalf("DELETE on t1.example: %d (upstream saw %d DELETEs)", a.Status, deletes.Load())
	}
	for range 2 {
		if gone := create("t1.example"); gone.Status != http.StatusGone || problemType(gone.Body) != "resource-deleted" {
			t.Fatalf("create's retry on t1.example after its DELETE: %d replayed=%v %s, want 410 resource-deleted", gone.Status, gone.replayed(), gone.Body)
		}
	}
	if a := create("t2.example"); a.Status != 201 || !a.replayed() || !strings.Contains(string(a.Body), "t2.example") {
		t.Fatalf("create's retry on t2.example after t1.example's DELETE: %d replayed=%v %s, want t2's replay", a.Status, a.replayed(), a.Body)
	}
	if n := up.Calls("alice", "create-1"); n != 2 {
		t.Fatalf("upstream ran alice's create %d times, want 2 (once per host)", n)
	}
}

// TestDefaultPortIsOneScope: with pass_host, "Host: t1.example" and
// "Host: t1.example:80" name one origin over http (RFC 9110 section
// 4.2.3, RFC 3986 section 6.2.3), as ":443" does over https: the retry
// with the port (or letter case and a trailing dot) replays, and only
// another port is another scope. Before, the retry with the port ran
// again.
func TestDefaultPortIsOneScope(t *testing.T) {
	up := startUpstream(t)
	t.Run("http", func(t *testing.T) {
		g := startGateWith(t, gateConfig{Upstream: up.URL}, passHost)
		url := g.URL + "/v1/orders"
		first := sendHost(t, http.DefaultClient, "POST", url, "t1.example", "alice", "http-1", `{}`)
		if first.Status != 201 || first.replayed() {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
		for _, host := range []string{"t1.example:80", "T1.Example.:80", "t1.example:"} {
			if a := sendHost(t, http.DefaultClient, "POST", url, host, "alice", "http-1", `{}`); a.Status != 201 || !a.replayed() || string(a.Body) != string(first.Body) {
				t.Errorf("retry with Host %s: %d replayed=%v %s, want the replay of %s", host, a.Status, a.replayed(), a.Body, first.Body)
			}
		}
		if n := up.Calls("alice", "http-1"); n != 1 {
			t.Fatalf("upstream ran the request %d times, want 1", n)
		}
		// Another port is another origin, and :443 is not http's default.
		for _, host := range []string{"t1.example:8080", "t1.example:443"} {
			if a := sendHost(t, http.DefaultClient, "POST", url, host, "alice", "http-1", `{}`); a.Status != 201 || a.replayed() {
				t.Errorf("request with Host %s: %d replayed=%v, want its own run", host, a.Status, a.replayed())
			}
		}
	})
	t.Run("https", func(t *testing.T) {
		dir := t.TempDir()
		ca := testcerts.NewCA(t, "server CA")
		srv := ca.Issue(t, testcerts.Options{CommonName: "idemgate", Server: true})
		certFile := testcerts.Write(t, dir, "tls.crt", srv.CertPEM)
		keyFile := testcerts.Write(t, dir, "tls.key", srv.KeyPEM)
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		c := tlsClient(roots, nil)
		g := startGateWith(t, gateConfig{Upstream: up.URL,
			Extra: fmt.Sprintf("server:\n  tls: {cert_file: %q, key_file: %q}\n", certFile, keyFile)}, passHost)
		url := "https://" + strings.TrimPrefix(g.URL, "http://") + "/v1/orders"
		first := sendHost(t, c, "POST", url, "t1.example", "alice", "https-1", `{}`)
		if first.Status != 201 || first.replayed() {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
		if a := sendHost(t, c, "POST", url, "t1.example:443", "alice", "https-1", `{}`); a.Status != 201 || !a.replayed() {
			t.Errorf("retry with Host t1.example:443 over https: %d replayed=%v, want the replay", a.Status, a.replayed())
		}
		if n := up.Calls("alice", "https-1"); n != 1 {
			t.Fatalf("upstream ran the request %d times, want 1", n)
		}
		if a := sendHost(t, c, "POST", url, "t1.example:80", "alice", "https-1", `{}`); a.Status != 201 || a.replayed() {
			t.Errorf("request with Host t1.example:80 over https: %d replayed=%v, want its own run", a.Status, a.replayed())
		}
	})
}
