package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyAcksReplayWaitsForTheCompletionsAcknowledgement: two Caddy
// instances with store.valkey.acks on a real primary and replica. The
// replica stops acknowledging while the upstream acts, so the completion
// is not acknowledged; a retry through the second Caddy is refused (503)
// rather than handed that response, which a failover could still lose
// (and a takeover then run again). Once the replica is back, the retry is
// replayed and the upstream ran once.
func TestCaddyAcksReplayWaitsForTheCompletionsAcknowledgement(t *testing.T) {
	// A takeover route withholds the holder's answer; a fail_open route
	// sends it, and must not take the retry's unacknowledged completion
	// for a store it cannot reach (it forwarded the retry unprotected:
	// the upstream ran twice).
	for name, route := range map[string]string{
		"takeover":  "  on_abandoned: takeover\n",
		"fail_open": "  on_store_error: fail_open\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := startCaddyAcksPair(t, "caddy-acksreplay:", route)
			holder, other, up, replica, until201 := p.holder, p.other, p.up, p.replica, p.until201
			until201(holder.URL, "warm", "a request with the replica live")

			up.hold = make(chan struct{})
			first := make(chan answer, 1)
			go func() {
				a, _ := tryPostHost(holder.URL, "api.example", "alice", "made", `{}`)
				first <- a
			}()
			for up.execs.Load() < 2 {
				time.Sleep(10 * time.Millisecond)
			}
			replica.Pause() // the upstream acts; its completion cannot be acknowledged
			close(up.hold)
			t.Logf("the holder's answer, its completion not acknowledged: %d", (<-first).Status)
			retry := postHost(t, other.URL, "api.example", "alice", "made", `{}`)
			t.Logf("a retry through the other Caddy meanwhile: %d %s", retry.Status, retry.Body)
			if retry.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(retry), "store-unavailable") {
				t.Errorf("a retry through the other Caddy while the completion is not acknowledged: %d %s, want 503 store-unavailable", retry.Status, retry.Body)
			}

			replica.Resume()
			if a := until201(other.URL, "made", "the retry once the replica is back"); !a.replayed() {
				t.Fatalf("the retry once the replica is back was not a replay: %s", a.Body)
			}
			if n := up.execs.Load(); n != 2 {
				t.Fatalf("upstream executed %d times for 2 operations", n)
			}
		})
	}
}

// TestCaddyClaimNotAcknowledgedIsNotForwarded: the Caddy module's shape of
// the proxy's TestClaimNotAcknowledgedIsNotForwardedOnValkey. The replica
// stops acknowledging before the request comes: its claim stands on the
// primary only, where a failover could lose it and a retry on the new
// primary would run the operation again, so the request is refused 503
// store-unavailable and nothing reaches the upstream. Once the replica is
// back, the retry runs, once.
func TestCaddyClaimNotAcknowledgedIsNotForwarded(t *testing.T) {
	p := startCaddyAcksPair(t, "caddy-acksclaim:", "")
	p.until201(p.holder.URL, "warm", "a request with the replica live")

	p.replica.Pause()
	a := postHost(t, p.holder.URL, "api.example", "alice", "fresh", `{}`)
	if n := p.up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times for 1 operation: a claim not acknowledged was forwarded (answered %d %s)", n, a.Status, a.Body)
	}
	if a.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(a), "store-unavailable") {
		t.Errorf("a claim not acknowledged: %d %s, want 503 store-unavailable", a.Status, a.Body)
	}

	p.replica.Resume()
	if a := p.until201(p.other.URL, "fresh", "the retry once the replica is back"); a.replayed() {
		t.Fatalf("the retry once the replica is back was a replay of an operation that never ran: %s", a.Body)
	}
	if n := p.up.execs.Load(); n != 2 {
		t.Fatalf("upstream executed %d times for 2 operations", n)
	}
}

// caddyAcksPair is two Caddy instances (holder and other), one site of
// Host api.example each, on one Valkey primary with a replica and
// store.valkey.acks (1 replica, 300ms), in front of one counting upstream.
type caddyAcksPair struct {
	holder, other *caddyProc
	up            *upstream
	replica       *valkeytest.Server
	// until201 posts alice's {} with key to url until a 201, while the
	// answers are 503, for 20 s.
	until201 func(url, key, what string) answer
}

// startCaddyAcksPair starts a caddyAcksPair whose keys are under prefix,
// with route appended to the configuration's defaults.
func startCaddyAcksPair(t *testing.T, prefix, route string) *caddyAcksPair {
	t.Helper()
	primary := valkeytest.Start(t)
	p := &caddyAcksPair{replica: valkeytest.StartReplica(t, primary.Addr()), up: startUpstream(t)}
	yaml := fmt.Sprintf(`
store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: %q
    acks:
      replicas: 1
      timeout: 300ms`, primary.Addr(), prefix) + noStoreYAML + route
	// One Host for both, as behind a load balancer: the host joins the key
	// scope in Caddy.
	site := caddySite{YAML: yaml, Hosts: map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(p.up.URL, "http://")}}
	p.holder, p.other = runCaddy(t, site), runCaddy(t, site)
	p.until201 = func(url, key, what string) answer {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			a := postHost(t, url, "api.example", "alice", key, `{}`)
			if a.Status == http.StatusCreated {
				return a
			}
			if a.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s: %d %s", what, a.Status, a.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return p
}
