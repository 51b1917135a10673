package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddySlowUpstreamBeyondLeaseRunsOnce: the Caddy module's shape of
// the binary's TestFaultSlowUpstreamBeyondLease. An upstream that takes
// 2.5 s under a 1 s lease keeps its claim through the heartbeat:
// duplicates through a second Caddy at 1.5 s and 2 s, after the first
// lease would have ended, are refused 409 request-in-progress, never
// sent on; once the call ends, the retry is replayed, and the upstream
// ran once.
func TestCaddySlowUpstreamBeyondLeaseRunsOnce(t *testing.T) {
	vk := valkeytest.Start(t)
	var execs atomic.Int64
	up := gatetest.CountingUpstream(t, &execs, sleepThenCreate(2500*time.Millisecond))
	yaml := fmt.Sprintf(`
store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: "caddy-slow:"`, vk.Addr()) + strings.Replace(noStoreYAML, "lease: 5s", "lease: 1s", 1) + "  concurrent: conflict\n"
	// One Host for both, as behind a load balancer: the host joins the key
	// scope in Caddy.
	site := caddySite{YAML: yaml, Hosts: map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}}
	holder, other := runCaddy(t, site), runCaddy(t, site)

	start := time.Now()
	first := make(chan answer, 1)
	go func() {
		a, _ := tryPostHost(holder.URL, "api.example", "alice", "k-slow", `{}`)
		first <- a
	}()
	gatetest.Eventually(t, 10*time.Second, "the upstream to run the first request", func() bool { return execs.Load() == 1 })
	for _, at := range []time.Duration{1500 * time.Millisecond, 2 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		d := postHost(t, other.URL, "api.example", "alice", "k-slow", `{}`)
		if n := execs.Load(); n != 1 || d.Status != http.StatusConflict || !strings.HasSuffix(problemType(d), "request-in-progress") {
			t.Fatalf("duplicate at %v while the upstream runs: %d %s (upstream ran %d times), want 409 request-in-progress: the heartbeat lost the claim",
				at, d.Status, d.Body, n)
		}
	}
	orig := <-first
	if orig.Status != http.StatusCreated {
		t.Fatalf("original: %d %s", orig.Status, orig.Body)
	}
	if a := postHost(t, other.URL, "api.example", "alice", "k-slow", `{}`); !a.replayed() || a.Body != orig.Body {
		t.Fatalf("retry after the call: %d replayed=%v %s, want the replay of %s", a.Status, a.replayed(), a.Body, orig.Body)
	}
	if n := execs.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}
