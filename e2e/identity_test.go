package e2e

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// reconfigure replaces the gate's config file atomically (as an editor's
// save or a ConfigMap update does) with c on the same ports, sends SIGHUP
// and waits until a reload of the new file was applied.
func (g *Gate) reconfigure(t *testing.T, c gateConfig) {
	t.Helper()
	doc := c.yaml(g.addr(), strings.TrimPrefix(g.AdminURL, "http://"))
	tmp := filepath.Join(filepath.Dir(g.config), ".next.yaml")
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(g.Logs(), `"config reloaded"`)
	if err := os.Rename(tmp, g.config); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	cmd := g.cmd
	g.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the reload of the new config", func() bool {
		return strings.Count(g.Logs(), `"config reloaded"`) > before
	})
}

// TestReloadKeepsRecords: a reload that changes the
// routes or their fingerprint settings must leave every record reachable
// by its retries. For each change, one operation completed before the
// reload and one still running during it are retried after it: each must be
// answered from its record (replayed, or waited for and replayed), and the
// upstream must execute each exactly once. Before layout 2 the route's name
// was part of the identity, so adding a more specific route or renaming one
// ran both operations again, and a fingerprint change answered 422.
func TestReloadKeepsRecords(t *testing.T) {
	orders := "  - name: orders\n    match: \"POST /v1/orders\"\n"
	payments := "  - name: payments\n    match: \"POST /v1/payments\"\n"
	for _, tc := range []struct {
		name          string
		before, after string
	}{
		{"more specific route added", "  - name: api\n    match: \"/v1/\"\n", "  - name: api\n    match: \"/v1/\"\n" + orders},
		{"route renamed", orders, strings.Replace(orders, "name: orders", "name: orders-v2", 1)},
		{"routes reordered", orders + payments, payments + orders},
		{"route match changed", orders, "  - name: orders\n    match: \"POST /v1/{collection}\"\n"},
		{"fingerprint settings changed", orders, orders + "    fingerprint: {headers: [Content-Type, X-Client-Trace], query: false, body: json}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := valkeytest.Start(t)
			up := startUpstream(t)
			c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: tc.before}
			g := startGate(t, c)
			url := g.URL + "/v1/orders"

			done := mustPost(t, url, "alice", "done-1", `{"n":1}`)
			if done.Status != 201 || done.replayed() {
				t.Fatalf("first request: %v", done)
			}
			entered := make(chan struct{}, 4)
			up.Set(nil, 2*time.Second, entered)
			running := make(chan Answer, 1)
			go func() { running <- postTimeout(30*time.Second, url, "alice", "run-1", `{"n":2}`) }()
			waitEntered(t, entered, 10*time.Second)

			c.Routes = tc.after
			g.reconfigure(t, c)

			retryDone := mustPost(t, url, "alice", "done-1", `{"n":1}`)
			if retryDone.Status != 201 || !retryDone.replayed() || !bytes.Equal(retryDone.Body, done.Body) {
				t.Errorf("retry of the completed operation after the reload: %v, want a replay of %s", retryDone, done.Body)
			}
			retryRunning := postTimeout(30*time.Second, url, "alice", "run-1", `{"n":2}`)
			first := <-running
			if first.Status != 201 {
				t.Fatalf("the operation running during the reload: %v", first)
			}
			if retryRunning.Status != 201 || !retryRunning.replayed() || !bytes.Equal(retryRunning.Body, first.Body) {
				t.Errorf("retry of the running operation after the reload: %v, want it to wait and replay %s", retryRunning, first.Body)
			}
			for _, key := range []string{"done-1", "run-1"} {
				if n := up.Calls("alice", key); n != 1 {
					t.Errorf("upstream executed %s %d times, want 1", key, n)
				}
			}
			// The same key on another endpoint of the shared scope is a
			// reuse, never a replay of the orders response.
			if other := mustPost(t, g.URL+"/v1/payments", "alice", "done-1", `{"n":1}`); other.Status != 422 {
				t.Errorf("key reused on /v1/payments: %v, want 422", other)
			}
		})
	}
}

// TestTwoConfigVersionsConcurrentDuplicates: records stay reachable across
// config versions (as TestReloadKeepsRecords) during a
// rolling ConfigMap update two replicas run different configs (here a
// renamed route with other fingerprint settings) while duplicates of one
// operation reach both at the same moment. Each operation must run once.
func TestTwoConfigVersionsConcurrentDuplicates(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	up.Set(nil, 300*time.Millisecond, nil)
	oldCfg := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken,
		Routes: "  - name: orders\n    match: \"POST /v1/orders\"\n"}
	newCfg := oldCfg
	newCfg.Routes = "  - name: create-order\n    match: \"POST /v1/orders\"\n    required: true\n" +
		"    fingerprint: {headers: [Content-Type, X-Client-Trace], query: false, body: json}\n"
	gates := []*Gate{startGate(t, oldCfg), startGate(t, newCfg)}

	const ops, dups = 4, 6
	answers := make([][]Answer, ops)
	var wg sync.WaitGroup
	for op := range ops {
		answers[op] = make([]Answer, dups)
		for d := range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := gates[d%2]
				answers[op][d] = postTimeout(30*time.Second, g.URL+"/v1/orders", "bob", "op-"+string(rune('a'+op)), `{"op":1}`)
			}()
		}
	}
	wg.Wait()
	for op := range ops {
		key := "op-" + string(rune('a'+op))
		if n := up.Calls("bob", key); n != 1 {
			t.Errorf("%s executed %d times across two config versions, want 1", key, n)
		}
		for d, a := range answers[op] {
			if a.Status != 201 || !bytes.Equal(a.Body, answers[op][0].Body) {
				t.Errorf("%s duplicate %d (gate %d): %v, want 201 with the one response", key, d, d%2, a)
			}
		}
	}
}

// TestV1RecordsReplayAfterUpgrade writes records exactly as idemgate wrote
// them before layout 2 (scoped by route name, no recipe; docs/protocol.md,
// "Layout versions") and checks that their retries are answered from them
// after the upgrade: replayed when the request is the same, 422 when it is
// not, and nothing reaches the upstream. With store.v1_lookup: false the
// old record is not consulted (the documented switch for after the
// longest retention).
func TestV1RecordsReplayAfterUpgrade(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	c := storeClient(t, v.Addr())

	body := `{"n":1}`
	req, _ := http.NewRequest("POST", "http://gate/v1/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	fp := policy.DefaultRoute().Fingerprint.Of(req, []byte(body))
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	writeV1 := func(key string) {
		t.Helper()
		id := store.Identity{Owner: identity.HeaderOwner("alice"), Scope: "orders", Key: key}
		now := time.Now().UnixMilli()
		h := valkey.EncodeHeader(http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/orders/legacy"}})
		err := c.Do(t.Context(), c.B().Hset().Key(valkey.Key(valkey.DefaultKeyPrefix, id)).FieldValue().
			FieldValue("o", id.Owner).FieldValue("r", id.Scope).FieldValue("k", id.Key).
			FieldValue("s", "completed").FieldValue("f", fp).FieldValue("c", ms(now-2000)).
			FieldValue("x", ms(now+3600000)).FieldValue("rt", "3600000").FieldValue("st", "201").
			FieldValue("h", string(h)).FieldValue("b", `{"order":"legacy"}`).FieldValue("om", "0").
			FieldValue("sa", ms(now-1000)).Build()).Error()
		if err != nil {
			t.Fatal(err)
		}
	}
	writeV1("legacy-1")
	writeV1("legacy-2")
	writeV1("legacy-3")
	routes := "  - name: orders\n    match: \"POST /v1/orders\"\n"
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes})
	url := g.URL + "/v1/orders"

	for i := range 2 {
		a := mustPost(t, url, "alice", "legacy-1", body)
		if a.Status != 201 || !a.replayed() || string(a.Body) != `{"order":"legacy"}` || a.Header.Get("Location") != "/v1/orders/legacy" {
			t.Fatalf("retry %d of an operation recorded in layout 1: %v, want its replay", i, a)
		}
	}
	if a := mustPost(t, url, "alice", "legacy-2", `{"n":2}`); a.Status != 422 {
		t.Fatalf("layout 1 key reused with another body: %v, want 422", a)
	}
	if up.Total() != 0 {
		t.Fatalf("upstream executed %d requests, want 0", up.Total())
	}

	g2 := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes},
		func(doc string) string {
			return strings.Replace(doc, "  driver: valkey\n", "  driver: valkey\n  v1_lookup: false\n", 1)
		})
	if a := mustPost(t, g2.URL+"/v1/orders", "alice", "legacy-3", body); a.Status != 201 || a.replayed() {
		t.Fatalf("with v1_lookup: false: %v, want the request forwarded", a)
	}
	if n := up.Calls("alice", "legacy-3"); n != 1 {
		t.Fatalf("with v1_lookup: false the upstream executed %d times, want 1", n)
	}
}
