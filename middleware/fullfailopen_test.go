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

// TestValkeyFullFailOpenNeverRunsACallAgain: the middleware's shape of e2e
// TestFaultValkeyFullFailOpenKeepsARunningCallOnce. On a route with
// on_store_error: fail_open, Valkey fills up (maxmemory-policy noeviction)
// while one keyed call runs and after another completed. Valkey still
// answers reads: a duplicate of the running call is answered as one is
// (409, concurrent: conflict) and a retry of the completed one is
// replayed; neither is forwarded unprotected as if the store could not be
// reached. A new key, which needs a write, is fail_open's to forward.
func TestValkeyFullFailOpenNeverRunsACallAgain(t *testing.T) {
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
	cfg := testConfig(vk.Addr(), "mw-fullopen:") + "    concurrent: conflict\n    on_store_error: fail_open\n"
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
	// The store refuses writes indeed: a new key is forwarded unprotected.
	if fresh := send(other.URL, "fresh"); fresh.status != http.StatusCreated || fresh.header.Get("Idempotent-Replayed") == "true" {
		t.Errorf("a new key with Valkey full on a fail_open route: %d %s, want the handler's 201", fresh.status, fresh.body)
	}
	unhold.Do(func() { close(hold) })
	if a := <-first; a.status != http.StatusCreated {
		t.Fatalf("the running call: %d %s", a.status, a.body)
	}
}
