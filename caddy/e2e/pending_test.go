package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

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
