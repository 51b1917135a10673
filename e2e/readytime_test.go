package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// readyAfter polls /readyz every 2 ms from the moment the gate's admin
// listener answered /healthz (Start returned: the listeners are open) and
// returns how long it took to answer 200; it fails t after 30 s.
func readyAfter(t *testing.T, g *Gate) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		resp, err := http.Get(g.AdminURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(start)
			}
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("/readyz not 200 30s after listening:\n%s", g.Logs())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestTimeToReady measures, on the real binary started lazily (no
// --wait-store) in front of a running Valkey and a running PostgreSQL, the
// time from its listeners opening to /readyz 200, and checks that a keyed
// request sent at that moment is served, not refused 503. The figures are
// logged (go test -v), not asserted: they depend on the machine.
func TestTimeToReady(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	pg := pgtest.Start(t)
	for _, tc := range []struct {
		name string
		cfg  gateConfig
	}{
		{"valkey", gateConfig{Upstream: up.URL, ValkeyAddrs: []string{vk.Addr()}, Routes: ordersRoute()}},
		{"postgres", gateConfig{Upstream: up.URL, PostgresDSN: pg.DSN(), Routes: ordersRoute()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var figures []time.Duration
			for i := range 3 {
				g := startGateArgs(t, tc.cfg, nil)
				d := readyAfter(t, g)
				figures = append(figures, d)
				key := tc.name + "-" + time.Now().Format("150405.000000") + "-" + string(rune('a'+i))
				if a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}"); a.Status != 201 {
					t.Fatalf("keyed request right after /readyz 200: %v", a)
				}
				g.Stop()
			}
			t.Logf("%s: listening to /readyz 200: %v", tc.name, figures)
		})
	}
}

// TestStoreUpFollowsReadyz: idemgate_store_up and /readyz report one state.
// Across a lazy start, a Valkey outage and its recovery, every time two
// /readyz answers around a scrape of /metrics agree, the scrape's
// idemgate_store_up agrees with them (1 with 200, 0 with 503).
func TestStoreUpFollowsReadyz(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	g := startGateArgs(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{vk.Addr()}, Routes: ordersRoute()}, nil)
	polls, disagreements := 0, 0
	// poll returns the /readyz state when the two answers around the scrape
	// agree (and checks the scrape), else -1.
	poll := func() int {
		r1, _ := getAdmin(t, g, "/readyz")
		m := metricValue(t, g, "idemgate_store_up")
		r2, _ := getAdmin(t, g, "/readyz")
		if r1 != r2 {
			return -1
		}
		polls++
		want := 0.0
		if r1 == 200 {
			want = 1
		}
		if m != want {
			disagreements++
			t.Errorf("poll %d: /readyz %d but idemgate_store_up %v", polls, r1, m)
		}
		return r1
	}
	until := func(what string, code int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for poll() != code {
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz not %d after 30s", what, code)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// A few more polls in the new state.
		for range 10 {
			poll()
			time.Sleep(20 * time.Millisecond)
		}
	}
	until("lazy start", 200)
	vk.Stop()
	until("Valkey stopped", 503)
	vk.Restart()
	until("Valkey back", 200)
	t.Logf("%d agreeing polls, %d disagreements", polls, disagreements)
}
