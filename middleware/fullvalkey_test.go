package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestValkeyFullNeverRunsACallAgain: the middleware's shape of e2e
// TestFaultValkeyFullFailOpenKeepsARunningCallOnce, TestFaultValkeyFullFailsClosed
// and TestFaultValkeyFullReplaysCompleted. Valkey fills up
// (maxmemory-policy noeviction) while one keyed call runs and after
// another completed. Valkey still answers reads: through a second
// instance (no replay cached: its claims read), a duplicate of the running
// call is answered as one is (409, concurrent: conflict) and a retry of
// the completed one is replayed; neither is run again, on a fail_open
// route either, where they are not forwarded unprotected as if the store
// could not be reached. A new key needs a write: refused 503 on a
// fail_closed route, fail_open's to forward on the other.
func TestValkeyFullNeverRunsACallAgain(t *testing.T) {
	for _, route := range []string{"fail_closed", "fail_open"} {
		t.Run(route, func(t *testing.T) { testValkeyFull(t, route) })
	}
}

// testValkeyFull runs TestValkeyFullNeverRunsACallAgain on a route with
// on_store_error: route.
func testValkeyFull(t *testing.T, route string) {
	vk := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	o := newOrders()
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	var unhold sync.Once
	var running atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first run of the key "running" waits for hold; a second
		// one (the break) would run at once.
		if strings.Trim(r.Header.Get("Idempotency-Key"), `"`) == "running" && running.Add(1) == 1 {
			entered <- struct{}{}
			<-hold
		}
		o.ServeHTTP(w, r)
	})
	cfg := testConfig(vk.Addr(), "mw-full:") + "    concurrent: conflict\n    on_store_error: " + route + "\n"
	holder, other := serve(t, cfg, h), serve(t, cfg, h)
	// One Host for both, as behind a load balancer: the host joins the key
	// scope in process.
	send := func(url, key string) answer {
		t.Helper()
		a, err := postHost(t, noRetry, context.Background(), url, "orders.example", "alice", key, `{"item":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Before the server's Close, which waits for the held call.
	t.Cleanup(func() { unhold.Do(func() { close(hold) }) })
	done := send(holder.URL, "done")
	if done.status != http.StatusCreated {
		t.Fatalf("before Valkey is full: %d %s", done.status, done.body)
	}
	first := make(chan answer, 1)
	go func() {
		a, _ := postHost(t, noRetry, context.Background(), holder.URL, "orders.example", "alice", "running", `{"item":1}`)
		first <- a
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the running call never reached the handler")
	}

	free := vk.Fill(t)
	defer free()
	// On the other instance, which has no replay cached: its claims read.
	dup := send(other.URL, "running")
	if n := running.Load(); n != 1 {
		t.Fatalf("handler ran the running call %d times: its duplicate while Valkey was full (answered %d %s) was forwarded unprotected", n, dup.status, dup.body)
	}
	if dup.status != http.StatusConflict {
		t.Errorf("duplicate of a running call with Valkey full: %d %s, want 409 as with room", dup.status, dup.body)
	}
	again := send(other.URL, "done")
	if n := o.runsOf("done"); n != 1 {
		t.Fatalf("handler ran the completed call %d times: its retry while Valkey was full (answered %d %s) was forwarded unprotected", n, again.status, again.body)
	}
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || again.body != done.body {
		t.Errorf("retry of a completed call with Valkey full: %d replayed=%q %s, want the replay of %s",
			again.status, again.header.Get("Idempotent-Replayed"), again.body, done.body)
	}
	// The store refuses writes indeed: a new key cannot be claimed.
	fresh := send(other.URL, "fresh")
	switch {
	case route == "fail_open" && (fresh.status != http.StatusCreated || fresh.header.Get("Idempotent-Replayed") == "true"):
		t.Errorf("a new key with Valkey full on a fail_open route: %d %s, want the handler's 201", fresh.status, fresh.body)
	case route == "fail_closed" && o.runsOf("fresh") != 0:
		t.Errorf("a new key with Valkey full on a fail_closed route ran (answered %d %s), want it refused", fresh.status, fresh.body)
	case route == "fail_closed" && (fresh.status != http.StatusServiceUnavailable || !strings.Contains(fresh.body, "store-unavailable")):
		t.Errorf("a new key with Valkey full on a fail_closed route: %d %s, want 503 store-unavailable", fresh.status, fresh.body)
	}
	unhold.Do(func() { close(hold) })
	if a := <-first; a.status != http.StatusCreated {
		t.Fatalf("the running call: %d %s", a.status, a.body)
	}
}
