package e2e

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// waitMetric polls the gate's /metrics, up to 15 s, until series reads want.
func waitMetric(t *testing.T, g *Gate, series string, want float64) {
	t.Helper()
	if !gatetest.Until(15*time.Second, func() bool { return metricValue(t, g, series) == want }) {
		t.Fatalf("%s never read %v", series, want)
	}
}

// TestFaultStoreDownRefusesAtOnce: the binary on a Valkey that is killed. Once
// the connector finds it down (idemgate_store_up 0, the state /readyz
// reports), keyed requests are refused 503 store-unavailable with
// Retry-After at once instead of after the store timeout, a completed key
// in the replay cache included (README, "Store outages"), while a
// fail_open route still reaches the upstream unprotected. When Valkey is
// back, the same requests run once and their retries replay.
func TestFaultStoreDownRefusesAtOnce(t *testing.T) {
	// Kept on disk: the records written before the kill are there after.
	srv := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{srv.Addr()},
		Routes: ordersRoute() + "  - name: loose\n    match: \"POST /v1/loose\"\n    on_store_error: fail_open\n"})

	done := mustPost(t, g.URL+"/v1/orders", "alice", "k-done", "{}")
	if done.Status != 201 {
		t.Fatalf("before the outage: %v", done)
	}
	// Read again so the replay cache holds the completed record.
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k-done", "{}"); !a.replayed() {
		t.Fatalf("retry before the outage not replayed: %v", a)
	}

	srv.Kill()
	waitMetric(t, g, "idemgate_store_up", 0)
	// Each request waited for all of the store timeout (1.5 s and more on
	// a refused connection) before the connector's state was consulted.
	const fast = proxy.DefaultStoreTimeout / 2
	for _, key := range []string{"k-new-1", "k-new-2", "k-done"} {
		start := time.Now()
		a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}")
		took := time.Since(start)
		if !a.isProblem(503, "store-unavailable") || a.Header.Get("Retry-After") == "" {
			t.Fatalf("key %s with the store down: %v; want 503 store-unavailable with Retry-After", key, a)
		}
		if took >= fast {
			t.Errorf("key %s refused after %v with the store down; want at once (under %v, the store timeout is %v)", key, took, fast, proxy.DefaultStoreTimeout)
		}
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d calls, want 1 (only before the outage)", n)
	}
	if a := mustPost(t, g.URL+"/v1/loose", "alice", "k-loose", "{}"); a.Status != 201 || up.Calls("alice", "k-loose") != 1 {
		t.Fatalf("fail_open route with the store down: %v, upstream ran it %d times; want it forwarded unprotected", a, up.Calls("alice", "k-loose"))
	}

	srv.Restart()
	back := time.Now()
	waitMetric(t, g, "idemgate_store_up", 1)
	t.Logf("the connector saw the store back after %v", time.Since(back))
	a := mustPost(t, g.URL+"/v1/orders", "alice", "k-new-1", "{}")
	if a.Status != 201 || a.replayed() {
		t.Fatalf("first keyed request once the store is back: %v", a)
	}
	for key, want := range map[string]Answer{"k-new-1": a, "k-done": done} {
		if r := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}"); !r.replayed() || string(r.Body) != string(want.Body) {
			t.Fatalf("retry of %s once the store is back: %v; want the replay of %s", key, r, want.Body)
		}
		if n := up.Calls("alice", key); n != 1 {
			t.Errorf("upstream ran %s %d times, want 1", key, n)
		}
	}
}
