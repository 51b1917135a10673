package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestOverloadRefusedAtOnce: the real binary with server.max_store_waiting
// 8 on a store frozen with SIGSTOP: Valkey, and PostgreSQL with a pool of
// 2 connections (the six other admitted requests wait in pgxpool's
// acquire). Eight keyed requests wait for the store
// (idemgate_store_waiting 8); a flood of 40 more keyed requests, sent while
// they wait, is answered 503 overloaded with Retry-After at once (far
// inside the 2 s store timeout that the waiting ones run into) and none
// reaches the upstream or claims its key; a request that is not enforced
// passes meanwhile. After SIGCONT the gate recovers: the waiting count
// returns to 0, and each refused key, never claimed, is forwarded exactly
// once on its retry.
func TestOverloadRefusedAtOnce(t *testing.T) {
	t.Run("valkey", func(t *testing.T) {
		v := valkeytest.Start(t)
		testOverloadRefusedAtOnce(t, gateConfig{ValkeyAddrs: []string{v.Addr()}}, nil, v.Pause, v.Resume)
	})
	t.Run("postgres", func(t *testing.T) {
		pg := pgtest.Start(t)
		tinyPool := func(doc string) string {
			return strings.Replace(doc, "  postgres:\n", "  postgres:\n    max_conns: 2\n", 1)
		}
		testOverloadRefusedAtOnce(t, gateConfig{PostgresDSN: pg.DSN()}, tinyPool, pg.Pause, pg.Resume)
	})
}

func testOverloadRefusedAtOnce(t *testing.T, c gateConfig, edit func(string) string, pause, resume func()) {
	const bound, flood = 8, 40
	up := startUpstream(t)
	c.Upstream = up.URL
	g := startGateWith(t, c, func(doc string) string {
		if edit != nil {
			doc = edit(doc)
		}
		return doc + fmt.Sprintf("server:\n  max_store_waiting: %d\n", bound)
	})
	url := g.URL + "/v1/orders"
	if a := mustPost(t, url, "alice", "warm", `{}`); a.Status != http.StatusCreated {
		t.Fatalf("warm-up: %v", a)
	}

	pause()
	t.Cleanup(resume)
	var held sync.WaitGroup
	heldAnswers := make([]Answer, bound)
	for i := range bound {
		held.Add(1)
		go func() {
			defer held.Done()
			heldAnswers[i] = postTimeout(30*time.Second, url, "alice", fmt.Sprintf("held-%d", i), `{}`)
		}()
	}
	eventually(t, 10*time.Second, "idemgate_store_waiting = 8", func() bool {
		return metricValue(t, g, "idemgate_store_waiting") == bound
	})

	// The flood, concurrently, while the admitted ones wait for the frozen
	// store.
	answers := make([]Answer, flood)
	took := make([]time.Duration, flood)
	var wg sync.WaitGroup
	floodStart := time.Now()
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			answers[i] = postTimeout(30*time.Second, url, "bob", fmt.Sprintf("flood-%d", i), `{}`)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	floodTook := time.Since(floodStart)
	var slowest time.Duration
	for i, a := range answers {
		if !a.isProblem(http.StatusServiceUnavailable, "overloaded") || a.Header.Get("Retry-After") != "1" {
			t.Errorf("flood request %d: %v (Retry-After %q), want 503 overloaded with Retry-After: 1", i, a, a.Header.Get("Retry-After"))
		}
		slowest = max(slowest, took[i])
	}
	t.Logf("%d keyed requests past the bound refused in %v, the slowest after %v (the store timeout is 2 s)", flood, floodTook.Round(time.Millisecond), slowest.Round(time.Millisecond))
	// At once means before the store timeout the admitted requests wait
	// out; the margin is for a loaded machine opening 40 connections.
	if slowest >= 1500*time.Millisecond {
		t.Errorf("the slowest refusal took %v, want at once (well inside the 2 s store timeout)", slowest)
	}
	// Not enforced: a GET without a key never waits for the store.
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("passthrough GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("passthrough GET while the store is frozen = %d, want the upstream's 201", resp.StatusCode)
	}
	if n := up.Total(); n != 2 {
		t.Errorf("upstream executed %d requests, want 2 (the warm-up and the GET): nothing refused or held may be forwarded", n)
	}
	if n := metricValue(t, g, "idemgate_store_admission_rejected_total"); n != flood {
		t.Errorf("idemgate_store_admission_rejected_total = %v, want %d", n, flood)
	}
	if n := metricValue(t, g, `idemgate_requests_total{outcome="overloaded",route="default"}`); n != flood {
		t.Errorf(`idemgate_requests_total{outcome="overloaded"} = %v, want %d`, n, flood)
	}

	resume()
	held.Wait()
	for i, a := range heldAnswers {
		// Admitted: they waited for the store and failed closed at its
		// timeout, or were answered once it resumed.
		if !a.isProblem(http.StatusServiceUnavailable, "store-unavailable") && a.Status != http.StatusCreated {
			t.Errorf("admitted request %d: %v, want 503 store-unavailable or 201", i, a)
		}
	}
	eventually(t, 10*time.Second, "idemgate_store_waiting back to 0", func() bool {
		return metricValue(t, g, "idemgate_store_waiting") == 0
	})
	// Nothing was claimed for a refused key: its retry is forwarded at
	// once, not found running.
	for i := range flood {
		key := fmt.Sprintf("flood-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		a := post(ctx, url, "bob", key, `{}`)
		cancel()
		if a.Status != http.StatusCreated || a.replayed() {
			t.Fatalf("retry of refused %s after SIGCONT: %v, want forwarded (201, not replayed)", key, a)
		}
		if n := up.Calls("bob", key); n != 1 {
			t.Fatalf("%s executed %d times, want 1", key, n)
		}
	}
}
