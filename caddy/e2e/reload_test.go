package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// reload replaces c's configuration with site's as caddy reload does
// (the admin API's /load), and returns Caddy's answer when it refuses it.
// Caddy answers once the new configuration serves and the old one's
// servers have begun their graceful shutdown, before the requests they
// still run have ended.
func (c *caddyProc) reload(t *testing.T, site caddySite) error {
	t.Helper()
	body, err := os.ReadFile(c.writeConfig(t, site))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.AdminURL+"/load", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	// The old configuration's servers close their idle connections: the
	// requests that follow go out on new ones, as a browser's would.
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reload refused: %d %s", resp.StatusCode, msg)
	}
	return nil
}

// postRetried is tryPost, sent again (at most twice more) when the
// connection fails, as a client with an idempotency key does. Caddy opens
// the new configuration's listening socket beside the old one
// (SO_REUSEPORT), and a connection still queued on the old one when it
// closes is reset before Caddy reads it.
func postRetried(url, user, key, body string) (answer, error) {
	a, err := tryPost(url, user, key, body)
	for i := 0; err != nil && i < 2; i++ {
		a, err = tryPost(url, user, key, body)
	}
	return a, err
}

// result is an answer, or the error that stopped it.
type result struct {
	a   answer
	err error
}

// postAsync sends a POST with send (tryPost, postRetried) on a goroutine
// of its own and delivers its result on the channel.
func postAsync(send func(url, user, key, body string) (answer, error), url, user, key, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		a, err := send(url, user, key, body)
		ch <- result{a, err}
	}()
	return ch
}

// postAfterReload is post, with postRetried.
func postAfterReload(t *testing.T, url, user, key, body string) answer {
	t.Helper()
	a, err := postRetried(url, user, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// otherSite is a site that has nothing to do with idempotency: a reload
// that adds it changes the configuration (Caddy ignores a /load of the
// configuration it runs) and nothing else.
func otherSite(t *testing.T) string {
	return fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\trespond \"other\"\n}\n", valkeytest.FreePort(t))
}

// adminMetric returns the value of the sample line that starts with
// name (e.g. "idemgate_store_up ") on c's admin /metrics, "" if none.
func (c *caddyProc) adminMetric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get(c.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			return v
		}
	}
	return ""
}

// TestCaddyReloadKeepsMemoryRecords: with the memory store (the module's
// default), a key completed before a reload that only adds an unrelated
// site is replayed after it, and the upstream runs once. The metrics of
// the new configuration (a registry of its own) are on Caddy's /metrics,
// the store up, and a second reload works as well.
func TestCaddyReloadKeepsMemoryRecords(t *testing.T) {
	up := startUpstream(t)
	site := caddySite{YAML: noStoreYAML, After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c := runCaddy(t, site)
	first := post(t, c.URL, "alice", "k-reload", `{"amount":1}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s\n%s", first.Status, first.Body, c.out.String())
	}
	for i := range 2 {
		site.Sites += otherSite(t)
		if err := c.reload(t, site); err != nil {
			t.Fatalf("reload %d: %v\n%s", i+1, err, c.out.String())
		}
		sameResponse(t, first, postAfterReload(t, c.URL, "alice", "k-reload", `{"amount":1}`))
		if n := up.execs.Load(); n != 1 {
			t.Fatalf("after reload %d: upstream executed %d times, want 1", i+1, n)
		}
		if v := c.adminMetric(t, "idemgate_store_up "); v != "1" {
			t.Fatalf("after reload %d: idemgate_store_up %q on Caddy's /metrics, want 1", i+1, v)
		}
		// The new configuration's registry, where this replay alone counts.
		if v := c.adminMetric(t, `idemgate_requests_total{outcome="replayed",`); !strings.HasSuffix(v, "} 1") {
			t.Fatalf("after reload %d: replays on Caddy's /metrics %q, want the new configuration's 1", i+1, v)
		}
	}
}

// TestCaddyReloadMidCall: a call in flight while Caddy reloads keeps its
// claim, on the memory store (the module's default) as on Valkey; its
// duplicate, which the new configuration serves, waits for it and is
// replayed its answer, as is a retry after: the upstream runs once.
func TestCaddyReloadMidCall(t *testing.T) {
	for _, store := range []string{"memory", "valkey"} {
		t.Run(store, func(t *testing.T) {
			up := startUpstream(t)
			up.hold = make(chan struct{})
			site := caddySite{YAML: noStoreYAML, After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
			if store == "valkey" {
				site.Idempotency = "store_addrs " + valkeytest.Start(t).Addr()
			}
			c := runCaddy(t, site)

			first := postAsync(tryPost, c.URL, "alice", "k-mid", `{"amount":2}`)
			gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
			site.Sites = otherSite(t)
			if err := c.reload(t, site); err != nil {
				close(up.hold)
				t.Fatalf("reload: %v\n%s", err, c.out.String())
			}
			dup := postAsync(postRetried, c.URL, "alice", "k-mid", `{"amount":2}`)
			// The duplicate waits (the new configuration's waiters gauge),
			// or, had it no claim to wait for, runs.
			gatetest.Eventually(t, 20*time.Second, "the duplicate waiting or at the upstream", func() bool {
				return c.adminMetric(t, "idemgate_waiters ") == "1" || up.execs.Load() > 1
			})
			close(up.hold)
			f, d := <-first, <-dup
			if f.err != nil || d.err != nil {
				t.Fatalf("first: %v, duplicate: %v", f.err, d.err)
			}
			if f.a.Status != http.StatusCreated {
				t.Fatalf("first: %d %s", f.a.Status, f.a.Body)
			}
			if n := up.execs.Load(); n != 1 {
				t.Fatalf("upstream executed %d times for a call and its duplicate across a reload, want 1", n)
			}
			sameResponse(t, f.a, d.a)
			sameResponse(t, f.a, postAfterReload(t, c.URL, "alice", "k-mid", `{"amount":2}`))
		})
	}
}

// TestCaddyReloadBolt: the bolt store's file stays open across a reload
// that keeps its settings (a second open would find it locked), with its
// records; a reload to another file gets a store on that file; back to
// the first file, the store opens again (the one that held it was closed
// when no configuration used it) and replays what it recorded.
func TestCaddyReloadBolt(t *testing.T) {
	up := startUpstream(t)
	dir := t.TempDir()
	boltYAML := func(file string) string {
		return fmt.Sprintf("store:\n  driver: bolt\n  bolt:\n    path: %q\n%s", filepath.Join(dir, file), noStoreYAML)
	}
	site := caddySite{YAML: boltYAML("a.db"), After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c := runCaddy(t, site)
	first := post(t, c.URL, "alice", "k-bolt", `{"amount":3}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s\n%s", first.Status, first.Body, c.out.String())
	}

	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload that adds a site: %v", err)
	}
	sameResponse(t, first, postAfterReload(t, c.URL, "alice", "k-bolt", `{"amount":3}`))

	// A new site as well: Caddy ignores a /load of the configuration it
	// runs, and idemgate's file is not part of it (caddy reload --force).
	site.YAML, site.Sites = boltYAML("b.db"), site.Sites+otherSite(t)
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload to another bolt file: %v", err)
	}
	if a := postAfterReload(t, c.URL, "alice", "k-bolt", `{"amount":3}`); a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("on the new file: %d replayed=%v %s, want a fresh 201 (a new store)", a.Status, a.replayed(), a.Body)
	}
	if n := up.execs.Load(); n != 2 {
		t.Fatalf("upstream executed %d times, want 2 (once per store)", n)
	}

	site.YAML, site.Sites = boltYAML("a.db"), site.Sites+otherSite(t)
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload back to the first file: %v", err)
	}
	sameResponse(t, first, postAfterReload(t, c.URL, "alice", "k-bolt", `{"amount":3}`))
	if n := up.execs.Load(); n != 2 {
		t.Fatalf("upstream executed %d times, want 2", n)
	}
}

// TestCaddyReloadOntoAnotherStoreMidCall: a reload that moves the handler
// to another store (another Valkey key prefix) while a call runs: the old
// store stays open until that call has returned, so its answer is
// recorded where its claim is, and a retry there (a reload back to the
// old prefix) is replayed it: the upstream runs once.
func TestCaddyReloadOntoAnotherStoreMidCall(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	up.hold = make(chan struct{})
	onPrefix := func(prefix string) string {
		return fmt.Sprintf("store_addrs %s\n\t\tkey_prefix %s", vk.Addr(), prefix)
	}
	site := caddySite{YAML: noStoreYAML, Idempotency: onPrefix("caddy-old:"), After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c := runCaddy(t, site)

	first := postAsync(tryPost, c.URL, "alice", "k-move", `{"amount":4}`)
	gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
	site.Idempotency = onPrefix("caddy-new:")
	if err := c.reload(t, site); err != nil {
		close(up.hold)
		t.Fatalf("reload onto another prefix: %v\n%s", err, c.out.String())
	}
	close(up.hold)
	f := <-first
	if f.err != nil || f.a.Status != http.StatusCreated {
		t.Fatalf("first: %v %d %s", f.err, f.a.Status, f.a.Body)
	}

	site.Idempotency = onPrefix("caddy-old:")
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload back to the first prefix: %v", err)
	}
	sameResponse(t, f.a, postAfterReload(t, c.URL, "alice", "k-move", `{"amount":4}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}
