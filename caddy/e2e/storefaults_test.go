package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyStartsWithTheStoreDown: Caddy starts while its Valkey is not
// there, and is reloaded while it is still away. Keyed requests are
// refused 503 store-unavailable and never reach the upstream, before and
// after the reload; once a valkey-server listens on the configured
// address, the key runs once and its retry is replayed.
func TestCaddyStartsWithTheStoreDown(t *testing.T) {
	port := valkeytest.FreePort(t) // nobody listens there yet
	up := startUpstream(t)
	site := caddySite{
		Idempotency: fmt.Sprintf("store_addrs 127.0.0.1:%d\n\t\tkey_prefix caddy-startdown:", port),
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	}
	c := runCaddy(t, site)
	refused := func(when string) {
		t.Helper()
		a := post(t, c.URL, "alice", "k-down", `{}`)
		if a.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(a), "store-unavailable") {
			t.Fatalf("%s: %d %s, want 503 store-unavailable", when, a.Status, a.Body)
		}
		if n := up.execs.Load(); n != 0 {
			t.Fatalf("%s: the upstream ran %d times with the store down", when, n)
		}
	}
	refused("started with the store down")
	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload with the store down: %v\n%s", err, c.out.String())
	}
	refused("reloaded with the store down")

	valkeytest.Start(t, valkeytest.WithPort(port))
	var first answer
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		first = postAfterReload(t, c.URL, "alice", "k-down", `{}`)
		if first.Status != http.StatusServiceUnavailable {
			break
		}
		if n := up.execs.Load(); n != 0 {
			t.Fatalf("the upstream ran %d times while refused", n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s 20s after valkey-server started", first.Status, first.Body)
		}
	}
	if first.Status != http.StatusCreated || first.replayed() {
		t.Fatalf("once the store is up: %d %s, want it run", first.Status, first.Body)
	}
	sameResponse(t, first, post(t, c.URL, "alice", "k-down", `{}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyReloadDuringAnOutageWithAPendingResponse: Valkey dies while
// the upstream acts, Caddy is reloaded (same store settings) during the
// outage, and the upstream answers then: its response cannot be recorded
// and waits in the old configuration (a reject route sends it to the
// client at once). The outage outlasts the lease. Once Valkey is back,
// retries through the new configuration are refused or replayed, never
// run again, and end replayed.
func TestCaddyReloadDuringAnOutageWithAPendingResponse(t *testing.T) {
	vk := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	up.hold = make(chan struct{})
	site := caddySite{
		YAML:        strings.Replace(idemgateYAML, "lease: 5s", "lease: 1s", 1),
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-outage-reload:", vk.Addr()),
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	}
	c := runCaddy(t, site)
	first := postAsync(tryPost, c.URL, "alice", "k-pend", `{}`)
	for up.execs.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	vk.Kill()
	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		close(up.hold)
		t.Fatalf("reload during the outage: %v\n%s", err, c.out.String())
	}
	close(up.hold) // the upstream acted; its response cannot be recorded
	f := <-first
	if f.err != nil || f.a.Status != http.StatusCreated {
		t.Fatalf("first: %v %d %s, want the upstream's 201", f.err, f.a.Status, f.a.Body)
	}
	time.Sleep(2500 * time.Millisecond) // the outage outlasts the lease
	vk.Restart()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a := postAfterReload(t, c.URL, "alice", "k-pend", `{}`)
		if n := up.execs.Load(); n != 1 {
			t.Fatalf("upstream executed %d times, want 1 (retry: %d %s)", n, a.Status, a.Body)
		}
		if a.Status == http.StatusCreated {
			sameResponse(t, f.a, a)
			break
		}
		if a.Status != http.StatusServiceUnavailable && a.Status != http.StatusConflict || strings.HasSuffix(problemType(a), "outcome-unknown") {
			t.Fatalf("retry after the outage: %d %s, want 503 or 409 request-in-progress, then the replay", a.Status, a.Body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry still %d %s 20s after Valkey came back", a.Status, a.Body)
		}
	}
}

// TestCaddyReloadWhileAClaimWaitsOnAStalledStore: Valkey is stopped
// (SIGSTOP) when a keyed request comes, so its claim waits; Caddy is
// reloaded meanwhile, and Valkey resumes. Whatever the first request was
// answered (the claim went through, or timed out and was released), its
// retries through the new configuration never run the upstream a second
// time, and end replayed.
func TestCaddyReloadWhileAClaimWaitsOnAStalledStore(t *testing.T) {
	for _, stall := range []time.Duration{500 * time.Millisecond, 3 * time.Second} {
		t.Run(stall.String(), func(t *testing.T) {
			vk := valkeytest.Start(t)
			up := startUpstream(t)
			site := caddySite{
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-stalled:", vk.Addr()),
				After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
			}
			c := runCaddy(t, site)
			if a := post(t, c.URL, "alice", "warm", `{}`); a.Status != http.StatusCreated {
				t.Fatalf("warm-up: %d %s", a.Status, a.Body)
			}
			vk.Pause()
			first := postAsync(tryPost, c.URL, "alice", "k-stall", `{}`)
			time.Sleep(200 * time.Millisecond) // the claim is on its way
			site.Sites = otherSite(t)
			if err := c.reload(t, site); err != nil {
				vk.Resume()
				t.Fatalf("reload with a claim in flight: %v\n%s", err, c.out.String())
			}
			time.Sleep(stall)
			vk.Resume()
			f := <-first
			if f.err != nil {
				t.Fatal(f.err)
			}
			t.Logf("first: %d", f.a.Status)
			var last answer
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				last = postAfterReload(t, c.URL, "alice", "k-stall", `{}`)
				if n := up.execs.Load() - 1; n > 1 {
					t.Fatalf("upstream executed %d times for one key, want at most 1 (retry: %d %s)", n, last.Status, last.Body)
				}
				if last.replayed() {
					break
				}
				if last.Status == http.StatusCreated && f.a.Status == http.StatusCreated {
					t.Fatalf("retry after a first 201: %d %s, want the replay", last.Status, last.Body)
				}
				if time.Now().After(deadline) {
					t.Fatalf("retry still %d %s", last.Status, last.Body)
				}
			}
			if n := up.execs.Load() - 1; n != 1 {
				t.Fatalf("upstream executed %d times for one key, want 1", n)
			}
		})
	}
}
