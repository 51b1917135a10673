package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyValkeyFullNeverRunsACallAgain: the Caddy module's shape of e2e
// TestFaultValkeyFullFailOpenKeepsARunningCallOnce, TestFaultValkeyFullFailsClosed
// and TestFaultValkeyFullReplaysCompleted. Valkey fills up
// (maxmemory-policy noeviction) while one keyed call runs and after
// another completed. Valkey still answers reads: on a second Caddy (no
// replay cached: its claims read), a duplicate of the running call is
// answered as one is (409, concurrent: conflict) and a retry of the
// completed one is replayed; neither is run again, with fail_open either,
// where they are not forwarded unprotected as if the store could not be
// reached. A new key needs a write: refused 503 with fail_closed,
// fail_open's to forward with the other.
func TestCaddyValkeyFullNeverRunsACallAgain(t *testing.T) {
	for _, onError := range []string{"fail_closed", "fail_open"} {
		t.Run(onError, func(t *testing.T) { testCaddyValkeyFull(t, onError) })
	}
}

// testCaddyValkeyFull runs TestCaddyValkeyFullNeverRunsACallAgain with
// on_store_error: onError.
func testCaddyValkeyFull(t *testing.T, onError string) {
	vk := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	var execs atomic.Int64
	var mu sync.Mutex
	runs := map[string]int{}
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	var unhold sync.Once
	// The first run of the key "running" waits for hold; a second one (the
	// break) would answer at once.
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, r *http.Request, n int64) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		runs[key]++
		first := runs[key] == 1
		mu.Unlock()
		if key == "running" && first {
			entered <- struct{}{}
			<-hold
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"execution":%d}`, key, n)
	})
	// Before the upstream's Close, which waits for the held call.
	t.Cleanup(func() { unhold.Do(func() { close(hold) }) })
	runsOf := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[key]
	}
	yaml := fmt.Sprintf(`
store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: "caddy-full:"`, vk.Addr()) + noStoreYAML + "  concurrent: conflict\n  on_store_error: " + onError + "\n"
	// One Host for both, as behind a load balancer: the host joins the key
	// scope in Caddy.
	site := caddySite{YAML: yaml, Hosts: map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}}
	holder, other := runCaddy(t, site), runCaddy(t, site)
	send := func(url, key string) answer { t.Helper(); return postHost(t, url, "api.example", "alice", key, `{}`) }

	done := send(holder.URL, "done")
	if done.Status != http.StatusCreated {
		t.Fatalf("before Valkey is full: %d %s", done.Status, done.Body)
	}
	first := make(chan answer, 1)
	go func() {
		a, _ := tryPostHost(holder.URL, "api.example", "alice", "running", `{}`)
		first <- a
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the running call never reached the upstream")
	}

	free := vk.Fill(t)
	defer free()
	dup := send(other.URL, "running")
	if n := runsOf("running"); n != 1 {
		t.Fatalf("upstream ran the running call %d times: its duplicate while Valkey was full (answered %d %s) was forwarded unprotected", n, dup.Status, dup.Body)
	}
	if dup.Status != http.StatusConflict {
		t.Errorf("duplicate of a running call with Valkey full: %d %s, want 409 as with room", dup.Status, dup.Body)
	}
	again := send(other.URL, "done")
	if n := runsOf("done"); n != 1 {
		t.Fatalf("upstream ran the completed call %d times: its retry while Valkey was full (answered %d %s) was forwarded unprotected", n, again.Status, again.Body)
	}
	if again.Status != http.StatusCreated || !again.replayed() || again.Body != done.Body {
		t.Errorf("retry of a completed call with Valkey full: %d replayed=%v %s, want the replay of %s", again.Status, again.replayed(), again.Body, done.Body)
	}
	// The store refuses writes indeed: a new key cannot be claimed.
	fresh := send(other.URL, "fresh")
	switch {
	case onError == "fail_open" && (fresh.Status != http.StatusCreated || fresh.replayed()):
		t.Errorf("a new key with Valkey full and fail_open: %d %s, want the upstream's 201", fresh.Status, fresh.Body)
	case onError == "fail_closed" && runsOf("fresh") != 0:
		t.Errorf("a new key with Valkey full and fail_closed ran (answered %d %s), want it refused", fresh.Status, fresh.Body)
	case onError == "fail_closed" && (fresh.Status != http.StatusServiceUnavailable || !strings.HasSuffix(problemType(fresh), "store-unavailable")):
		t.Errorf("a new key with Valkey full and fail_closed: %d %s, want 503 store-unavailable", fresh.Status, fresh.Body)
	}
	unhold.Do(func() { close(hold) })
	if a := <-first; a.Status != http.StatusCreated {
		t.Fatalf("the running call: %d %s", a.Status, a.Body)
	}
}
