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

// TestCaddyWaitersOfAReleasedClaimRunOnce: the Caddy module's shape of
// the proxy's TestWaitersOfAReleasedClaimRunOnce, on Valkey. Duplicates
// wait (concurrent: wait, the default) while the first call runs; the
// upstream then answers that call with a status the configuration does
// not store (503), which releases the key. The record the waits end on is
// not completed, so every waiter claims again and exactly one of them
// reaches the upstream; the others get its replay.
func TestCaddyWaitersOfAReleasedClaimRunOnce(t *testing.T) {
	const n = 8
	vk := valkeytest.Start(t)
	release := make(chan struct{})
	var unblock sync.Once
	var execs atomic.Int64
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, n int64) {
		if n == 1 {
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"execution":%d}`, n)
	})
	// Before the upstream's Close, which waits for the held call.
	t.Cleanup(func() { unblock.Do(func() { close(release) }) })
	c := runCaddy(t, caddySite{
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-waiters:", vk.Addr()),
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	})
	send := func() answer {
		a, err := tryPost(c.URL, "alice", "k-wait", `{"n":1}`)
		if err != nil {
			return answer{Status: -1, Body: err.Error()}
		}
		return a
	}

	first := make(chan answer, 1)
	go func() { first <- send() }()
	gatetest.Eventually(t, 10*time.Second, "the first call at the upstream", func() bool { return execs.Load() == 1 })
	out := make(chan answer, n)
	for range n {
		go func() { out <- send() }()
	}
	c.waitMetric(t, fmt.Sprintf("idemgate_waiters %d", n))
	unblock.Do(func() { close(release) })
	if a := <-first; a.Status != http.StatusServiceUnavailable {
		t.Fatalf("first = %d %s, want the upstream's 503", a.Status, a.Body)
	}
	fresh, replayed := 0, 0
	for range n {
		switch a := <-out; {
		case a.Status == http.StatusCreated && a.replayed():
			replayed++
		case a.Status == http.StatusCreated:
			fresh++
		default:
			t.Errorf("waiter: %d %s", a.Status, a.Body)
		}
	}
	if fresh != 1 || replayed != n-1 {
		t.Errorf("fresh %d replayed %d, want 1 and %d", fresh, replayed, n-1)
	}
	if e := execs.Load(); e != 2 {
		t.Fatalf("upstream executed %d times, want 2 (the released call, then one waiter)", e)
	}
}
