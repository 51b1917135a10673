package proxy_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestAcksReplayWaitsForTheCompletionsAcknowledgement, on a real primary
// and replica with acks on: the replica stops acknowledging while the
// upstream runs, so the holder's completion is not acknowledged (on a
// takeover route the holder withholds it). A retry on another instance
// (with the replay cache) is refused with 503 rather than handed that
// response: a failover could still lose the completion and, the holder
// dead, a takeover would run the operation again after a client got its
// result. Once the replica is back, the retry is replayed; the upstream
// ran once.
func TestAcksReplayWaitsForTheCompletionsAcknowledgement(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "acksreplay-" + hex.EncodeToString(b) + ":"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "made" {
			replica.Pause()
		}
		created(w, r)
	})
	target, _ := url.Parse(up.URL)
	route := baseRoute()
	route.OnAbandoned = policy.AbandonedTakeover
	pol, err := policy.New(route, nil)
	if err != nil {
		t.Fatal(err)
	}
	gate := func(cacheBytes int64) *httptest.Server {
		vo := valkey.Options{Addrs: []string{primary.Addr()}, KeyPrefix: prefix, CacheBytes: cacheBytes,
			Acks: valkey.Acks{Replicas: 1, Timeout: 300 * time.Millisecond}}
		front := httptest.NewServer(valkeyProxyOpts(t, vo, proxy.Options{Upstream: target, Timeout: 5 * time.Second,
			StoreTimeout: 2 * time.Second, Policy: func() *policy.Policy { return pol }}))
		t.Cleanup(front.Close)
		return front
	}
	holder, other := gate(0), gate(1<<20)
	c := &cacheRig{t: t}
	until201 := func(g *httptest.Server, key, what string) result {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := c.post(g, "alice", key, "{}")
			if r.status == http.StatusCreated {
				return r
			}
			if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s: %d %s", what, r.status, r.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until201(holder, "warm", "a request with the replica live")

	first := c.post(holder, "alice", "made", "{}")
	t.Logf("the holder's answer, its completion not acknowledged: %d", first.status)
	retry := c.post(other, "alice", "made", "{}")
	t.Logf("a retry on another instance meanwhile: %d %s", retry.status, retry.body)
	if retry.status != http.StatusServiceUnavailable || !strings.Contains(retry.body, "store-unavailable") {
		t.Errorf("a retry on another instance while the completion is not acknowledged: %d %s, want 503 store-unavailable", retry.status, retry.body)
	}

	replica.Resume()
	replay := until201(other, "made", "the retry once the replica is back")
	if !strings.Contains(replay.body, `"echo"`) {
		t.Fatalf("replay body %q", replay.body)
	}
	if n := up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream ran %d times for 2 operations", n)
	}
}
