package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFaultCacheCutOffPeer: instance B has a completed record in its replay
// cache (store.valkey.cache_bytes on, the default) when it loses Valkey
// without a FIN: its link goes silent (a relay blackhole, like a
// partition) or Valkey freezes (SIGSTOP). docs/performance.md ("Replay
// cache") says "After any store failure the cache is not asked until a
// claim succeeds again, so an instance facing a frozen or partitioned
// Valkey fails closed as before": before the cache, B's retry had to
// claim, the claim timed out and B answered 503. Without the cache's fence
// (valkey.CacheFence) B replayed the record from memory for about 5 s after
// the cut (until valkey-go's keepalive closed the silent connection).
//
//   - purge: instance A, still connected, purges the record (admin API);
//     the invalidation cannot reach B;
//   - tombstone: A forwards a DELETE of the resource the record created
//     (resource_from), turning the record into a tombstone (a replay on
//     such a route also indexes the record, a round trip that fails and
//     turns the cache off, but only after the stale replay was decided);
//   - frozen: Valkey itself is stopped, so nobody can change the record,
//     but the store cannot answer for it either.
//
// In each case a replay from B after the cut would be served from a cache
// the store can no longer vouch for (purge, tombstone: a record that no
// longer exists), by an instance whose store is unreachable. Once
// CacheFence has passed since the cut, B must fail closed.
func TestFaultCacheCutOffPeer(t *testing.T) {
	for _, mode := range []string{"purge", "tombstone", "frozen"} {
		t.Run(mode, func(t *testing.T) { testCacheCutOffPeer(t, mode) })
	}
}

func testCacheCutOffPeer(t *testing.T, mode string) {
	const key = "cache-cut-1"
	v := valkeytest.Start(t)
	rl := startRelay(t, v.Addr())
	up := startUpstream(t)
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Location", "/v1/orders/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"owner":%q}`, r.Header.Get("X-User"))
	}, 0, nil)
	routes := ordersRoute("retention: 1h")
	if mode == "tombstone" {
		routes = ordersRoute("retention: 1h", "resource_from: location")
	}
	a := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes})
	b := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{rl.Addr()}, AdminToken: adminToken, Routes: routes})

	url := b.URL + "/v1/orders"
	if first := mustPost(t, url, "alice", key, `{"n":1}`); first.Status != 201 || first.replayed() {
		t.Fatalf("first POST through B: %v, want a forwarded 201", first)
	}
	// The first replay reads the record into B's cache; the next are hits.
	for i := range 3 {
		if r := mustPost(t, url, "alice", key, `{"n":1}`); !r.replayed() {
			t.Fatalf("replay %d through B: %v, want a replay", i, r)
		}
	}

	switch mode {
	case "purge":
		rl.Set(relayBlackhole, 0)
		if p := adminDo(t, "DELETE", recordURL(a, "orders", "alice", key, ""), adminToken); p.Status/100 != 2 {
			t.Fatalf("purge through A: %v", p)
		}
	case "tombstone":
		rl.Set(relayBlackhole, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, a.URL+"/v1/orders/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("DELETE through A: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE through A = %d, want 204", resp.StatusCode)
		}
		if gone := mustPost(t, a.URL+"/v1/orders", "alice", key, `{"n":1}`); gone.Status != http.StatusGone {
			t.Fatalf("retry through A after the DELETE: %v, want 410", gone)
		}
	case "frozen":
		v.Pause()
		t.Cleanup(v.Resume)
	}
	// Replays within CacheFence of the cut are what the fence admits.
	time.Sleep(valkey.CacheFence)
	cut := time.Now()

	var replays int
	var last time.Duration
	for time.Since(cut) < 6*time.Second {
		r := postTimeout(10*time.Second, url, "alice", key, `{"n":1}`)
		if r.replayed() {
			replays++
			last = time.Since(cut)
		} else if !r.isProblem(503, "store-unavailable") {
			t.Fatalf("%s: B answered %v with Valkey out of its reach, want 503 store-unavailable", mode, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if replays > 0 {
		t.Fatalf("%s: B replayed the record %d times with Valkey out of its reach, the last %v after the cut plus CacheFence; want fail closed (503) as without the cache",
			mode, replays, last.Round(time.Millisecond))
	}
	if n := up.Calls("alice", key); n != 1 {
		t.Fatalf("%s: upstream ran the create %d times, want 1", mode, n)
	}
}
