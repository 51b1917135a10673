package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyTakeoverRouteAnswersOnlyARecordedResponse: Valkey dies while
// the upstream behind reverse_proxy acts, so its response cannot be
// recorded. With on_abandoned: takeover, Caddy does not hand that response
// to the client (if Caddy died before recording it, a retry would take the
// claim over and run the operation again after the client had been told
// the first run's result): 503 store-unavailable with Retry-After, and once
// Valkey is back the retry gets the response replayed, the upstream having
// run once. The module runs the middleware's engine, as the proxy does.
func TestCaddyTakeoverRouteAnswersOnlyARecordedResponse(t *testing.T) {
	vk := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	up.hold = make(chan struct{})
	c := runCaddy(t, caddySite{
		YAML:        idemgateYAML + "  on_abandoned: takeover\n",
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-held:", vk.Addr()),
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	})

	type result struct {
		a   answer
		err error
	}
	first := make(chan result, 1)
	go func() {
		a, err := tryPost(c.URL, "alice", "held", `{}`)
		first <- result{a, err}
	}()
	for up.execs.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	vk.Kill() // the upstream acts; its response cannot be recorded
	close(up.hold)
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	a := r.a
	if a.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(a), "store-unavailable") || a.Header.Get("Retry-After") == "" {
		t.Fatalf("response not recorded: %d Retry-After=%q %s, want 503 store-unavailable with Retry-After", a.Status, a.Header.Get("Retry-After"), a.Body)
	}
	vk.Restart()
	c.waitMetric(t, "idemgate_store_up 1")
	var retry answer
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if retry = post(t, c.URL, "alice", "held", `{}`); retry.Status != http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s once Valkey is back", retry.Status, retry.Body)
		}
	}
	if retry.Status != http.StatusCreated || !retry.replayed() {
		t.Fatalf("retry once Valkey is back: %d %s, want the recorded response replayed", retry.Status, retry.Body)
	}
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyReloadKeepsAPendingResponse: Valkey is full (it refuses every
// write, the completion included) when the upstream answers, so the
// response is sent (a reject route does not withhold it) and waits in the
// handler to be recorded; Caddy then reloads onto another store (another
// key prefix). The store the response's claim is in stays open until the
// response is recorded there, as it stays open for a call still running:
// once Valkey has room again the response is recorded, and the retry
// (after a reload back to the first prefix) is replayed it, the upstream
// having run once. Closed when the last request ended, the store dropped
// the response: the claim ran out, and the retry got 409 outcome-unknown
// for a call whose client had its answer.
func TestCaddyReloadKeepsAPendingResponse(t *testing.T) {
	vk := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	up := startUpstream(t)
	up.hold = make(chan struct{})
	onPrefix := func(prefix string) string {
		return fmt.Sprintf("store_addrs %s\n\t\tkey_prefix %s", vk.Addr(), prefix)
	}
	site := caddySite{
		YAML:        idemgateYAML,
		Idempotency: onPrefix("caddy-first:"),
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	}
	c := runCaddy(t, site)

	first := postAsync(tryPost, c.URL, "alice", "pending", `{}`)
	gatetest.Eventually(t, 20*time.Second, "the first call at the upstream", func() bool { return up.execs.Load() == 1 })
	free := vk.Fill(t) // the upstream acts; its response cannot be recorded
	close(up.hold)
	f := <-first
	if f.err != nil || f.a.Status != http.StatusCreated {
		t.Fatalf("first: %v %d %s, want 201", f.err, f.a.Status, f.a.Body)
	}
	site.Idempotency = onPrefix("caddy-second:")
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload onto another prefix: %v\n%s", err, c.out.String())
	}
	free()
	if !gatetest.Until(10*time.Second, func() bool { return strings.Contains(c.out.String(), "recorded a response after a store outage") }) {
		t.Errorf("the pending response was not recorded once Valkey had room again")
	}
	site.Idempotency = onPrefix("caddy-first:")
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload back to the first prefix: %v", err)
	}
	retry := postAfterReload(t, c.URL, "alice", "pending", `{}`)
	if retry.Status != http.StatusCreated || !retry.replayed() {
		t.Errorf("retry: %d %s, want the recorded response replayed", retry.Status, retry.Body)
	}
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}
