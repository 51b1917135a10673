package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// Owner isolation: one key, two owners, at the same time on two instances
// and one after the other. Neither is ever answered with the other's
// response, neither is blocked (409/422) by the other's record.
func TestSecurityOwnerIsolation(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	up.Set(nil, 150*time.Millisecond, nil)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}}
	gates := []*Gate{startGate(t, c), startGate(t, c)}
	owners := []string{"alice", "bob", "carol"}
	const keys, rounds = 20, 3
	type result struct {
		owner string
		a     Answer
	}
	results := make(chan result, keys*len(owners)*rounds)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		for i, o := range owners {
			for r := 0; r < rounds; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Same key, same body for every owner: only the owner
					// scope tells the records apart.
					a := postTimeout(30*time.Second, gates[(i+r)%2].URL+"/v1/orders", o, fmt.Sprintf("shared-%d", k), `{"same":true}`)
					results <- result{o, a}
				}()
			}
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.a.Status != 201 {
			t.Fatalf("%s was answered %v: another owner's record blocked the key", r.owner, r.a)
		}
		if !strings.Contains(string(r.a.Body), fmt.Sprintf(`"owner":%q`, r.owner)) {
			t.Fatalf("%s was answered another owner's response: %s", r.owner, r.a.Body)
		}
	}
	for k := 0; k < keys; k++ {
		for _, o := range owners {
			if n := up.Calls(o, fmt.Sprintf("shared-%d", k)); n != 1 {
				t.Fatalf("%s/shared-%d executed %d times, want 1", o, k, n)
			}
		}
	}
	// In sequence, with a different body for the second owner: no 422,
	// since the first owner's fingerprint is none of its business.
	a1 := mustPost(t, gates[0].URL+"/v1/orders", "dave", "seq", `{"v":1}`)
	b1 := mustPost(t, gates[1].URL+"/v1/orders", "erin", "seq", `{"v":2}`)
	a2 := mustPost(t, gates[1].URL+"/v1/orders", "dave", "seq", `{"v":1}`)
	b2 := mustPost(t, gates[0].URL+"/v1/orders", "erin", "seq", `{"v":2}`)
	if a1.Status != 201 || b1.Status != 201 || b1.replayed() || !a2.replayed() || !b2.replayed() ||
		!bytes.Equal(a1.Body, a2.Body) || !bytes.Equal(b1.Body, b2.Body) || bytes.Equal(a1.Body, b1.Body) {
		t.Fatalf("in sequence: dave %v / %v, erin %v / %v", a1, a2, b1, b2)
	}
}

// Owners taken from the Authorization header are isolated too, and the
// credential is stored only as a hash.
func TestSecurityAuthorizationOwners(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: "  - name: pay\n    match: \"POST /v1/pay\"\n    owner: authorization\n"})
	send := func(auth string) Answer {
		req, _ := http.NewRequest("POST", g.URL+"/v1/pay", strings.NewReader("{}"))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Idempotency-Key", "pay-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return Answer{Err: err}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	x1, y1, x2 := send("Bearer token-of-x-0123456789"), send("Bearer token-of-y-9876543210"), send("Bearer token-of-x-0123456789")
	if x1.Status != 201 || y1.Status != 201 || y1.replayed() || !x2.replayed() || bytes.Equal(x1.Body, y1.Body) {
		t.Fatalf("x %v, y %v, x again %v", x1, y1, x2)
	}
	dump, err := v.CLI("--scan", "--pattern", "idemgate:*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range strings.Fields(dump) {
		if out, _ := v.CLI("HGETALL", k); strings.Contains(out, "token-of-") {
			t.Fatalf("record %s stores the raw Authorization value", k)
		}
	}
}

func TestSecurityAdminAPI(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken})
	mustPost(t, g.URL+"/v1/orders", "alice", "adm", "{}")
	rec := recordURL(g, "default", "alice", "adm", "")
	for _, m := range []string{"GET", "DELETE"} {
		for _, tok := range []string{"", "wrong", strings.ToUpper(adminToken)} {
			if a := adminDo(t, m, rec, tok); a.Status != 401 || problemType(a.Body) != "admin-unauthorized" {
				t.Fatalf("%s with token %q: %v, want 401", m, tok, a)
			}
		}
	}
	// A Basic credential carrying the token is not a bearer token.
	req, _ := http.NewRequest("GET", rec, nil)
	req.SetBasicAuth("admin", adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("Basic auth: %d, want 401", resp.StatusCode)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "adm", "{}"); !a.replayed() {
		t.Fatalf("a refused admin request changed the record: %v", a)
	}
	if a := adminDo(t, "GET", rec, adminToken); a.Status != 200 || !strings.Contains(string(a.Body), `"state":"completed"`) {
		t.Fatalf("GET with the token: %v", a)
	}
	// The proxy listener serves no admin API: /admin/ goes to the upstream
	// like any other path.
	if a := adminDo(t, "GET", g.URL+"/admin/records?route=default&owner=h:alice&key=adm", adminToken); strings.Contains(string(a.Body), `"state"`) {
		t.Fatalf("the proxy listener answered an admin request: %v", a)
	}

	// Without a configured token the admin API is off.
	off := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}})
	if a := adminDo(t, "GET", recordURL(off, "default", "alice", "adm", ""), "anything"); a.Status != 403 {
		t.Fatalf("admin API without a configured token: %v, want 403", a)
	}

	// By default the admin listener binds loopback only, with or without a
	// config file.
	path := filepath.Join(t.TempDir(), "min.yaml")
	if err := os.WriteFile(path, []byte("upstream:\n  url: \"http://127.0.0.1:1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, listen := range map[string]string{"built-in default": config.Default().Admin.Listen, "minimal file": cfg.Admin.Listen} {
		host, _, err := net.SplitHostPort(listen)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Fatalf("%s admin listen %q is not a loopback address", name, listen)
		}
	}
}

// Logs, at debug level and through every path that logs (forward, replay,
// key reuse, invalid key, upstream failure, store outage, admin purge), never
// contain the raw idempotency key, the Authorization value or the Cookie
// value.
func TestSecurityLogsHoldNoSecrets(t *testing.T) {
	const (
		key    = "SECRET-KEY-5f1c2e"
		auth   = "Bearer SECRET-AUTH-9a8b7c"
		cookie = "SECRET-COOKIE-d4e5f6"
	)
	v := valkeytest.Start(t)
	up := startUpstream(t)
	g := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken,
		Routes: "  - name: pay\n    match: \"POST /v1/pay\"\n    owner: authorization\n    lease: 1s\n"},
		func(doc string) string { return strings.Replace(doc, "level: info", "level: debug", 1) })
	send := func(path, k, body string) Answer {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+path, strings.NewReader(body))
		req.Header.Set("X-User", "alice")
		req.Header.Set("Authorization", auth)
		req.Header.Set("Cookie", "session="+cookie)
		req.Header.Set("Idempotency-Key", k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return Answer{Err: err}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	for _, path := range []string{"/v1/orders", "/v1/pay"} {
		send(path, key, "{}")                            // forwarded
		send(path, key, "{}")                            // replayed
		send(path, key, `{"other":1}`)                   // key reused: 422
		send(path, key+" "+cookie, "{}")                 // invalid key
		send(path, `"`+key+`"x`, "{}")                   // invalid sf-string
		send(path, key+"-2", strings.Repeat("x", 2<<20)) // too large
	}
	up.Set(func(w http.ResponseWriter, r *http.Request) { // ambiguous upstream failure
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}, 0, nil)
	send("/v1/orders", key+"-3", "{}")
	up.Set(nil, 0, nil)
	adminDo(t, "DELETE", recordURL(g, "default", "alice", key, "&force=true"), adminToken)
	v.Stop()
	send("/v1/orders", key+"-4", "{}") // store down
	logs := g.Logs()
	if !strings.Contains(logs, "key_hash") {
		t.Fatalf("no request was logged at all:\n%s", logs)
	}
	for name, secret := range map[string]string{"idempotency key": "SECRET-KEY", "Authorization": "SECRET-AUTH", "Cookie": "SECRET-COOKIE"} {
		if i := strings.Index(logs, secret); i >= 0 {
			t.Fatalf("the logs contain the raw %s: ...%s...", name, logs[max(0, i-200):min(len(logs), i+100)])
		}
	}
}
