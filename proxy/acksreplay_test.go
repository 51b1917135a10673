package proxy_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
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
	a := startAcksGates(t, "acksreplay-", func(r *policy.Route) { r.OnAbandoned = policy.AbandonedTakeover })
	a.until201(a.holder, "warm", "a request with the replica live")

	first := a.post(a.holder, "made")
	t.Logf("the holder's answer, its completion not acknowledged: %d", first.status)
	retry := a.post(a.other, "made")
	t.Logf("a retry on another instance meanwhile: %d %s", retry.status, retry.body)
	if retry.status != http.StatusServiceUnavailable || !strings.Contains(retry.body, "store-unavailable") {
		t.Errorf("a retry on another instance while the completion is not acknowledged: %d %s, want 503 store-unavailable", retry.status, retry.body)
	}

	a.replica.Resume()
	replay := a.until201(a.other, "made", "the retry once the replica is back")
	if !strings.Contains(replay.body, `"echo"`) {
		t.Fatalf("replay body %q", replay.body)
	}
	if n := a.up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream ran %d times for 2 operations", n)
	}
}

// TestFailOpenNeverRunsAnUnacknowledgedCompletionAgain: the standalone
// proxy's shape of the middleware's and the Caddy module's test of the
// same name. Acks on, a route with on_store_error: fail_open. The replica
// stops acknowledging while the upstream runs, so its completion is on
// the primary but not acknowledged (the holder's client gets the response
// at once: fail_open). A retry on another instance finds the record
// completed, which the store may not hand out before its acknowledgement.
// The store answered, and the operation ran: the retry must be refused
// (503) until the acknowledgement comes, then replayed, never forwarded
// unprotected as if the store could not be reached.
func TestFailOpenNeverRunsAnUnacknowledgedCompletionAgain(t *testing.T) {
	a := startAcksGates(t, "acksopen-", func(r *policy.Route) { r.OnStoreError = policy.FailOpen })
	a.until201(a.holder, "warm", "a request with the replica live")

	first := a.post(a.holder, "made")
	if first.status != http.StatusCreated {
		t.Fatalf("the holder's answer on a fail_open route: %d %s, want the upstream's 201", first.status, first.body)
	}
	retry := a.post(a.other, "made")
	if n := a.made.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want once: a retry of a completed operation, its completion not yet acknowledged, was forwarded unprotected (retry: %d replayed=%q)",
			n, retry.status, retry.header.Get("Idempotent-Replayed"))
	}
	if retry.status != http.StatusServiceUnavailable || !strings.Contains(retry.body, "store-unavailable") {
		t.Errorf("a retry on another instance while the completion is not acknowledged: %d %s, want 503 store-unavailable", retry.status, retry.body)
	}

	a.replica.Resume()
	if r := a.until201(a.other, "made", "the retry once the replica is back"); r.header.Get("Idempotent-Replayed") != "true" || r.body != first.body {
		t.Fatalf("the retry once the replica is back: replayed=%q %s, want the replay of %s", r.header.Get("Idempotent-Replayed"), r.body, first.body)
	}
	if n := a.made.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want once", n)
	}
}

// acksGates is two proxies, holder (no replay cache) and other (with
// one), on one Valkey primary with a replica and store acks (1 replica,
// 300ms), in front of one upstream that pauses the replica when it runs
// the key "made": that key's completion is on the primary and not
// acknowledged.
type acksGates struct {
	t             *testing.T
	holder, other *httptest.Server
	up            *upstream
	replica       *valkeytest.Server
	// made counts the upstream's runs of the key "made".
	made atomic.Int32
	c    *cacheRig
}

// startAcksGates starts an acksGates whose route is baseRoute's changed by
// edit, its keys under a fresh prefix starting with prefix.
func startAcksGates(t *testing.T, prefix string, edit func(*policy.Route)) *acksGates {
	t.Helper()
	primary := valkeytest.Start(t)
	a := &acksGates{t: t, replica: valkeytest.StartReplica(t, primary.Addr()), c: &cacheRig{t: t}}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix += hex.EncodeToString(b) + ":"
	a.up = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "made" {
			a.made.Add(1)
			a.replica.Pause()
		}
		created(w, r)
	})
	target, _ := url.Parse(a.up.URL)
	route := baseRoute()
	edit(&route)
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
	a.holder, a.other = gate(0), gate(1<<20)
	return a
}

// post sends alice's {} with key to g.
func (a *acksGates) post(g *httptest.Server, key string) result {
	a.t.Helper()
	return a.c.post(g, "alice", key, "{}")
}

// until201 posts until a 201, while the answers are 503, for 10 s.
func (a *acksGates) until201(g *httptest.Server, key, what string) result {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.post(g, key)
		if r.status == http.StatusCreated {
			return r
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			a.t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClaimNotAcknowledgedIsNotForwardedOnValkey: TestClaimNotAcknowledgedIsNotForwarded
// on a real primary and replica, as the middleware's and the Caddy
// module's tests of the same scenario run it. The replica stops
// acknowledging before the request comes: its claim stands on the primary
// only, where a failover could lose it and a retry on the new primary
// would run the operation again, so the request is refused 503
// store-unavailable and nothing reaches the upstream. Once the replica is
// back, the retry runs, once.
func TestClaimNotAcknowledgedIsNotForwardedOnValkey(t *testing.T) {
	a := startAcksGates(t, "acksclaim-", func(*policy.Route) {})
	a.until201(a.holder, "warm", "a request with the replica live")
	before := a.up.count("/v1/orders")

	a.replica.Pause()
	r := a.post(a.holder, "fresh")
	if n := a.up.count("/v1/orders") - before; n != 0 {
		t.Fatalf("upstream ran %d times for a claim not acknowledged (answered %d %s)", n, r.status, r.body)
	}
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "store-unavailable") {
		t.Errorf("a claim not acknowledged: %d %s, want 503 store-unavailable", r.status, r.body)
	}

	a.replica.Resume()
	if r := a.until201(a.other, "fresh", "the retry once the replica is back"); r.header.Get(proxy.ReplayedHeader) == "true" {
		t.Fatalf("the retry once the replica is back was a replay of an operation that never ran: %s", r.body)
	}
	if n := a.up.count("/v1/orders") - before; n != 1 {
		t.Fatalf("upstream ran %d times, want once", n)
	}
}
