package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// ordersRoute is a routes: entry for POST /v1/orders named orders with the
// given extra settings (each "key: value").
func ordersRoute(settings ...string) string {
	var b strings.Builder
	b.WriteString("  - name: orders\n    match: \"POST /v1/orders\"\n")
	for _, s := range settings {
		b.WriteString("    " + s + "\n")
	}
	return b.String()
}

// waitEntered waits for one upstream call to start, failing after d.
func waitEntered(t *testing.T, entered <-chan struct{}, d time.Duration) time.Time {
	t.Helper()
	select {
	case <-entered:
		return time.Now()
	case <-time.After(d):
		t.Fatalf("the upstream was not called within %v", d)
	}
	return time.Time{}
}

// Scenario 1 (takeover): a proxy killed during the upstream call leaves a
// claim that a retry with the same fingerprint takes over one lease later,
// not one retention later; the re-forward is by design (on_abandoned:
// takeover) and is then replayed.
func TestFaultProxyKilledMidCallTakeover(t *testing.T) {
	const lease = 2 * time.Second
	v := valkeytest.Start(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 4)
	up.Set(nil, 1500*time.Millisecond, entered)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken,
		Routes: ordersRoute("lease: 2s", "on_abandoned: takeover")})

	sent := time.Now()
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(20*time.Second, g.URL+"/v1/orders", "alice", "crash-1", `{"n":1}`) }()
	waitEntered(t, entered, 10*time.Second)
	g.Kill()
	if a := <-first; a.Err == nil {
		t.Fatalf("the client of the killed proxy got an answer: %v", a)
	}
	g.Start()
	up.Set(nil, 0, entered)

	retry := postTimeout(30*time.Second, g.URL+"/v1/orders", "alice", "crash-1", `{"n":1}`)
	reforwardAt := waitEntered(t, entered, time.Second)
	if retry.Status != 201 || retry.replayed() {
		t.Fatalf("retry after the crash: %v, want a forwarded 201 (takeover)", retry)
	}
	if took := reforwardAt.Sub(sent); took < lease {
		t.Fatalf("the claim was taken over %v after the first request, before its %v lease ended", took, lease)
	} else if took > lease+8*time.Second {
		t.Fatalf("the claim was recovered only %v after the first request; want about one lease (%v)", took, lease)
	}
	if !strings.Contains(g.Logs(), "took over an abandoned claim") {
		t.Errorf("no takeover logged")
	}
	again := mustPost(t, g.URL+"/v1/orders", "alice", "crash-1", `{"n":1}`)
	if !again.replayed() || !bytes.Equal(again.Body, retry.Body) {
		t.Fatalf("second retry: %v, want a replay of the takeover's response", again)
	}
	// One effect of the crashed attempt (outcome unknown) plus one of the
	// takeover: the documented cost of on_abandoned: takeover.
	if n := up.Calls("alice", "crash-1"); n != 2 {
		t.Fatalf("upstream executed %d times, want 2 (crashed attempt + takeover)", n)
	}
}

// Scenario 1 (the default, on_abandoned: reject): the abandoned claim
// answers a terminal outcome-unknown problem naming when the call started,
// never re-forwards, until an operator purges the key through the admin
// API (which needs the token, and force while the lease runs).
func TestFaultProxyKilledMidCallRejectsByDefault(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 4)
	up.Set(nil, 1500*time.Millisecond, entered)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: testAdminToken,
		Routes: ordersRoute("lease: 3s", "concurrent: conflict")})
	const key = "crash-2"
	rec := recordURL(g, "orders", "alice", key, "")

	first := make(chan Answer, 1)
	sent := time.Now()
	go func() { first <- postTimeout(20*time.Second, g.URL+"/v1/orders", "alice", key, `{"n":2}`) }()
	claimed := waitEntered(t, entered, 10*time.Second)
	g.Kill()
	<-first
	g.Start()
	up.Set(nil, 0, entered)

	// Within the lease the holder may still be alive: a retry is told to
	// wait and a purge needs force.
	if time.Since(claimed) < 2500*time.Millisecond {
		a := mustPost(t, g.URL+"/v1/orders", "alice", key, `{"n":2}`)
		if !a.isProblem(409, "request-in-progress") {
			t.Fatalf("retry within the lease: %v, want 409 request-in-progress", a)
		}
		if a := adminDo(t, "DELETE", rec, testAdminToken); !a.isProblem(409, "admin-record-running") && time.Since(claimed) < 2900*time.Millisecond {
			t.Fatalf("purge within the lease without force: %v, want 409 admin-record-running", a)
		}
	}
	eventually(t, 10*time.Second, "the record to be abandoned", func() bool {
		a := adminDo(t, "GET", rec, testAdminToken)
		return a.Status == 200 && strings.Contains(string(a.Body), `"state":"abandoned"`)
	})
	// The purge is an operator's act: no token, a wrong token, no purge.
	if a := adminDo(t, "DELETE", rec, ""); a.Status != 401 {
		t.Fatalf("purge without a token: %v, want 401", a)
	}
	if a := adminDo(t, "DELETE", rec, "wrong"); a.Status != 401 {
		t.Fatalf("purge with a wrong token: %v, want 401", a)
	}
	outcomeUnknownUntilPurged(t, g, up, key, `{"n":2}`, sent)
}

// Scenario 2: an upstream slower than the lease keeps its claim through the
// heartbeat; duplicates at 0.5 s, 2 s and 3.5 s (to a second instance, so no
// in-process sharing hides a takeover) never reach the upstream.
func TestFaultSlowUpstreamBeyondLease(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 8)
	// The call lasts 3 s and at least until the duplicates that must find
	// it running were answered: with 3 s alone, the one sent at 2 s had a
	// second to be answered, and on a loaded machine found the call
	// completed and got its replay.
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"slow":%q}`, r.Header.Get("X-User"))
	}, 3*time.Second, entered)
	t.Cleanup(free) // before the upstream's Close, which waits for the call
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute("lease: 1s", "concurrent: conflict")}
	a, b := startGate(t, c), startGate(t, c)

	start := time.Now()
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(20*time.Second, a.URL+"/v1/orders", "alice", "slow", `{}`) }()
	waitEntered(t, entered, 5*time.Second)
	var dups []Answer
	for i, at := range []time.Duration{500 * time.Millisecond, 2 * time.Second, 3500 * time.Millisecond} {
		time.Sleep(time.Until(start.Add(at)))
		d := postTimeout(20*time.Second, b.URL+"/v1/orders", "alice", "slow", `{}`)
		t.Logf("duplicate at %v: %v", at, d)
		dups = append(dups, d)
		if i == 1 {
			free()
		}
	}
	orig := <-first
	if orig.Status != 201 || orig.replayed() {
		t.Fatalf("original: %v", orig)
	}
	for i, d := range dups[:2] {
		if !d.isProblem(409, "request-in-progress") {
			t.Errorf("duplicate %d while the upstream runs: %v, want 409 request-in-progress", i, d)
		}
	}
	// At 3.5 s the 3 s call has normally completed; on a loaded machine it
	// may still run, which must then still be a 409.
	if d := dups[2]; !(d.replayed() && bytes.Equal(d.Body, orig.Body)) && !d.isProblem(409, "request-in-progress") {
		t.Errorf("duplicate at 3.5s: %v, want a replay (or 409 if still running)", d)
	}
	final := mustPost(t, b.URL+"/v1/orders", "alice", "slow", `{}`)
	if !final.replayed() || !bytes.Equal(final.Body, orig.Body) {
		t.Fatalf("retry after completion: %v, want a replay", final)
	}
	if n := up.Calls("alice", "slow"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1: the heartbeat lost the claim", n)
	}
}

// Scenario 3: with Valkey down every enforced request is refused with 503
// and none reaches the upstream, passthrough traffic keeps flowing, and
// idemgate recovers by itself when Valkey is back.
func TestFaultValkeyDownFailsClosedAndRecovers(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute() + "  - name: uploads\n    match: \"/v1/uploads/\"\n    mode: passthrough\n"})
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "before", "{}"); a.Status != 201 {
		t.Fatalf("before the outage: %v", a)
	}
	v.Stop()
	before := up.Total()
	const n = 16
	answers := make([]Answer, n)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", fmt.Sprintf("down-%d", i), "{}")
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if !a.isProblem(503, "store-unavailable") || a.Header.Get("Retry-After") == "" {
			t.Fatalf("enforced request %d with Valkey down: %v, want 503 store-unavailable with Retry-After", i, a)
		}
	}
	// A replay needs the store too: refused, not forwarded.
	if a := postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "before", "{}"); !a.isProblem(503, "store-unavailable") {
		t.Fatalf("retry of a completed key with Valkey down: %v, want 503", a)
	}
	if got := up.Total() - before; got != 0 {
		t.Fatalf("%d enforced requests reached the upstream while the store was down", got)
	}
	if a := mustPost(t, g.URL+"/v1/uploads/x", "alice", "up-1", "data"); a.Status != 201 {
		t.Fatalf("passthrough route with Valkey down: %v, want the upstream's 201", a)
	}
	resp, err := http.Get(g.URL + "/v1/orders")
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("GET (not enforced) with Valkey down: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := up.Total() - before; got != 2 {
		t.Fatalf("upstream saw %d passthrough requests, want 2", got)
	}

	v.Restart() // same port; no AOF, so the records are gone
	var recovered Answer
	eventually(t, 20*time.Second, "idemgate to use the restarted Valkey", func() bool {
		recovered = postTimeout(10*time.Second, g.URL+"/v1/orders", "alice", "after", "{}")
		return recovered.Status != 503
	})
	if recovered.Status != 201 || recovered.replayed() {
		t.Fatalf("first request after recovery: %v", recovered)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "after", "{}"); !a.replayed() {
		t.Fatalf("retry after recovery: %v, want a replay", a)
	}
	if n := up.Calls("alice", "after"); n != 1 {
		t.Fatalf("upstream executed %d, want 1", n)
	}
	for i := 0; i < n; i++ {
		if c := up.Calls("alice", fmt.Sprintf("down-%d", i)); c != 0 {
			t.Fatalf("key down-%d reached the upstream %d times", i, c)
		}
	}
}

// Scenario 4: records completed before a Valkey crash survive it with
// appendonly yes / appendfsync always, and still replay afterwards.
func TestFaultValkeyRestartWithAOFKeepsRecords(t *testing.T) {
	v := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}})
	const n = 30
	firsts := make([]Answer, n)
	for i := range firsts {
		firsts[i] = mustPost(t, g.URL+"/v1/orders", "alice", fmt.Sprintf("aof-%d", i), fmt.Sprintf(`{"i":%d}`, i))
		if firsts[i].Status != 201 {
			t.Fatalf("first %d: %v", i, firsts[i])
		}
	}
	v.Kill() // a crash: nothing beyond the fsynced AOF survives
	v.Restart()
	unavailable := 0
	for i := range firsts {
		var a Answer
		eventually(t, 20*time.Second, "a non-503 answer after the restart", func() bool {
			a = postTimeout(10*time.Second, g.URL+"/v1/orders", "alice", fmt.Sprintf("aof-%d", i), fmt.Sprintf(`{"i":%d}`, i))
			if a.Status == 503 {
				unavailable++
				return false
			}
			return true
		})
		if !a.replayed() || !bytes.Equal(a.Body, firsts[i].Body) {
			t.Fatalf("key aof-%d after the Valkey restart: %v, want a replay of %s", i, a, firsts[i].Body)
		}
		if c := up.Calls("alice", fmt.Sprintf("aof-%d", i)); c != 1 {
			t.Fatalf("key aof-%d executed %d times", i, c)
		}
	}
	t.Logf("%d completed records replayed after the crash; %d answers were 503 while idemgate reconnected", n, unavailable)
}

// Scenario 5: a slow or dead link to Valkey turns store operations into 503s
// within the store timeout, never forwards a request unprotected, and leaves
// no claim without an expiry; once the link heals every key works again and
// runs once.
func TestFaultSlowAndLossyValkeyLink(t *testing.T) {
	v := valkeytest.Start(t)
	rl := startRelay(t, v.Addr())
	up := startUpstream(t)
	// A claim whose reply was lost and whose background release did not
	// land is taken over after its lease (below).
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{rl.Addr()},
		Routes: ordersRoute("lease: 1s", "on_abandoned: takeover")})
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "ok-0", "{}"); a.Status != 201 {
		t.Fatalf("healthy link: %v", a)
	}

	phases := []struct {
		name  string
		mode  relayMode
		delay time.Duration
	}{
		{"replies delayed 2.5s (past the 2s store timeout)", relayDelay, 2500 * time.Millisecond},
		{"link silent (blackhole)", relayBlackhole, 0},
		{"connections reset", relayReset, 0},
	}
	var faulted []string
	for pi, ph := range phases {
		rl.Set(ph.mode, ph.delay)
		var wg sync.WaitGroup
		answers := make([]Answer, 6)
		for i := range answers {
			key := fmt.Sprintf("fault-%d-%d", pi, i)
			faulted = append(faulted, key)
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				answers[i] = postTimeout(30*time.Second, g.URL+"/v1/orders", "alice", key, "{}")
				if took := time.Since(start); took > 10*time.Second {
					answers[i].Err = fmt.Errorf("answered after %v: the store timeout did not bound the wait", took)
				}
			}()
		}
		wg.Wait()
		for i, a := range answers {
			if !a.isProblem(503, "store-unavailable") {
				t.Fatalf("%s, request %d: %v, want 503 store-unavailable", ph.name, i, a)
			}
		}
		for _, key := range faulted {
			if c := up.Calls("alice", key); c != 0 {
				t.Fatalf("%s: key %s was forwarded %d times without its claim", ph.name, key, c)
			}
		}
		rl.Set(relayPass, 0)
		eventually(t, 20*time.Second, "the link to heal after "+ph.name, func() bool {
			a := postTimeout(10*time.Second, g.URL+"/v1/orders", "alice", fmt.Sprintf("heal-%d", pi), "{}")
			if a.Status != 201 {
				t.Logf("after %s, not healed yet: %v", ph.name, a)
			}
			return a.Status == 201
		})
	}

	// A delayed reply may have let a claim land in Valkey that idemgate
	// never heard of: it must carry an expiry (its lease end or later).
	// The scope's owner record is the one key kept forever, on purpose
	// (policy.OwnerRecord): it is completed at once, never left claimed.
	ownerRecord := valkey.Key("idemgate:", store.Identity{Owner: policy.OwnerRecordOwner, Scope: policy.DefaultScope, Key: "header"})
	for k, pttl := range idemgateKeys(t, v) {
		if pttl == -1 && k != ownerRecord {
			t.Errorf("key %s has no expiry: a lost claim would block its idempotency key forever", k)
		}
	}
	// Each faulted key is usable again (a claim left behind ends with its
	// 1 s lease and is taken over) and then runs exactly once.
	for _, key := range faulted {
		var a Answer
		eventually(t, 15*time.Second, "key "+key+" to be answered", func() bool {
			a = postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", key, "{}")
			return a.Status != 503 && a.Status != 409
		})
		if a.Status != 201 {
			t.Fatalf("key %s after the link healed: %v", key, a)
		}
		if c := up.Calls("alice", key); c != 1 {
			t.Fatalf("key %s executed %d times, want 1", key, c)
		}
	}
}

// Scenario 5 (in flight): the link dies while the upstream call runs and
// heals before the lease would end; Complete is retried within the lease, so
// the response is recorded and the retry replays.
func TestFaultLinkCutDuringCallStillRecords(t *testing.T) {
	v := valkeytest.Start(t)
	rl := startRelay(t, v.Addr())
	up := startUpstream(t)
	entered := make(chan struct{}, 2)
	up.Set(nil, 700*time.Millisecond, entered)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{rl.Addr()},
		Routes: ordersRoute("lease: 4s")})
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(30*time.Second, g.URL+"/v1/orders", "alice", "inflight", "{}") }()
	waitEntered(t, entered, 5*time.Second)
	rl.Set(relayReset, 0)
	time.Sleep(1200 * time.Millisecond) // the call ends while the link is down
	rl.Set(relayPass, 0)
	orig := <-first
	if orig.Status != 201 {
		t.Fatalf("original: %v", orig)
	}
	up.Set(nil, 0, nil)
	// Until a check finds the store back, keyed requests are refused 503
	// at once (nothing forwarded); a client retries those, as Retry-After
	// says.
	var a Answer
	eventually(t, 10*time.Second, "the retry to be answered by the store", func() bool {
		a = mustPost(t, g.URL+"/v1/orders", "alice", "inflight", "{}")
		return a.Status != 503
	})
	if !a.replayed() || !bytes.Equal(a.Body, orig.Body) {
		t.Fatalf("retry: %v, want a replay: the completion was not retried", a)
	}
	if n := up.Calls("alice", "inflight"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// Scenario 6: a client that disconnects right after sending does not cancel
// the upstream call; its response is recorded and the retry replays it.
func TestFaultClientGoneAfterSending(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 2)
	up.Set(nil, 400*time.Millisecond, entered)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}})
	body := `{"gone":true}`
	c, err := net.Dial("tcp", g.addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nIdempotency-Key: gone-1\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.Close() // gone before any answer
	waitEntered(t, entered, 5*time.Second)
	up.Set(nil, 0, nil)
	var a Answer
	eventually(t, 10*time.Second, "the retry to be answered 201", func() bool {
		a = postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "gone-1", body)
		return a.Status == 201
	})
	if !a.replayed() {
		t.Fatalf("the retry was forwarded again: %v", a)
	}
	if n := up.Calls("alice", "gone-1"); n != 1 {
		t.Fatalf("upstream executed %d, want 1", n)
	}
}

// Scenario 7: an upstream exchange that fails after the request was written
// (connection reset; a 201 whose body is cut short) is neither stored as a
// success nor released: retries within the lease are refused, and only the
// documented takeover after the lease forwards again.
func TestFaultUpstreamAmbiguousFailure(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"connection reset after the request", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0) // RST instead of FIN
			_ = c.Close()
		}},
		{"201 with a body shorter than Content-Length", func(w http.ResponseWriter, r *http.Request) {
			c, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"order\":")
			_ = buf.Flush()
			_ = c.Close()
		}},
		{"201 with a chunked body cut short", func(w http.ResponseWriter, r *http.Request) {
			c, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"order\":\r\n")
			_ = buf.Flush()
			_ = c.Close()
		}},
	}
	v := valkeytest.Start(t)
	up := startUpstream(t)
	// The retry "right after" must come within the lease of the claim (no
	// heartbeat keeps an ambiguous claim), two HTTP exchanges later: 3 s,
	// not 1 s, leaves a loaded machine room for them; the test then waits
	// for the lease to end.
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken,
		Routes: ordersRoute("lease: 3s", "concurrent: conflict", "on_abandoned: takeover")})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("ambiguous-%d", i)
			up.Set(tc.handler, 0, nil)
			a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}")
			if !a.isProblem(502, "upstream-failed") {
				t.Fatalf("ambiguous exchange: %v, want 502 upstream-failed", a)
			}
			up.Set(nil, 0, nil)
			if a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}"); !a.isProblem(409, "request-in-progress") {
				t.Fatalf("retry right after: %v, want 409: the key must stay claimed", a)
			}
			rec := adminDo(t, "GET", recordURL(g, "orders", "alice", key, ""), adminToken)
			if rec.Status != 200 || strings.Contains(string(rec.Body), `"state":"completed"`) {
				t.Fatalf("record after the ambiguous exchange: %v, want a claim, not a stored response", rec)
			}
			if n := up.Calls("alice", key); n != 1 {
				t.Fatalf("upstream executed %d, want 1", n)
			}
			var b Answer
			eventually(t, 10*time.Second, "the lease to end", func() bool {
				b = mustPost(t, g.URL+"/v1/orders", "alice", key, "{}")
				return b.Status != 409
			})
			if b.Status != 201 || b.replayed() {
				t.Fatalf("retry after the lease: %v, want the takeover's 201", b)
			}
			if n := up.Calls("alice", key); n != 2 {
				t.Fatalf("upstream executed %d, want 2 (ambiguous + takeover)", n)
			}
		})
	}
}

// A Valkey outage longer than the lease, while the upstream call runs: the
// response must still be recorded once Valkey is back (Complete acts past
// the lease end while nobody took the claim over), so the retry replays
// instead of running the operation again. idemgate used to give up
// recording after one lease and answer the client anyway.
func TestFaultValkeyOutageLongerThanLeaseDuringCall(t *testing.T) {
	v := valkeytest.Start(t, valkeytest.WithAOF())
	up := startUpstream(t)
	entered := make(chan struct{}, 2)
	up.Set(nil, 300*time.Millisecond, entered)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute("lease: 1s")})
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(60*time.Second, g.URL+"/v1/orders", "alice", "outage", "{}") }()
	waitEntered(t, entered, 5*time.Second)
	v.Kill()
	time.Sleep(3 * time.Second) // three leases without the store
	v.Restart()
	orig := <-first
	if orig.Status != 201 {
		t.Fatalf("original: %v", orig)
	}
	up.Set(nil, 0, nil)
	var a Answer
	eventually(t, 20*time.Second, "a non-503 retry", func() bool {
		a = postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "outage", "{}")
		return a.Status != 503
	})
	if !a.replayed() || !bytes.Equal(a.Body, orig.Body) {
		t.Fatalf("retry after the outage: %v, want a replay of %s", a, orig.Body)
	}
	if n := up.Calls("alice", "outage"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// Scenario 8: Valkey fills up (maxmemory-policy noeviction) while an
// upstream call runs, and stays full past the call's lease. The holder can
// no longer extend its claim; a duplicate sent to another instance must not
// take the claim over (it used to: claim.lua deleted the abandoned record
// first, and a script that has written is not checked for memory again, so
// the operation ran twice). The duplicate is answered from a read as with
// memory (409 under concurrent: conflict); every keyed request on either
// instance that needs a claim (new keys) is refused with 503 while Valkey
// is full; a completed key still replays (it needs no write). Once
// memory is freed the held response is recorded and replayed, and no
// operation ran twice.
func TestFaultValkeyFullFailsClosed(t *testing.T) {
	v := startFillableValkey(t)
	up := startUpstream(t)
	entered, unblock := holdFirstCall(t, up, "full")
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute("lease: 1s", "concurrent: conflict")}
	a, b := startGate(t, c), startGate(t, c)

	done := mustPost(t, a.URL+"/v1/orders", "alice", "done", "{}")
	waitEntered(t, entered, 5*time.Second)
	if done.Status != 201 {
		t.Fatalf("before Valkey is full: %v", done)
	}
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(60*time.Second, a.URL+"/v1/orders", "alice", "full", "{}") }()
	waitEntered(t, entered, 10*time.Second)

	free := v.Fill(t)
	defer free()
	// Claims and completions are refused from now on (the heartbeat still
	// runs: extend.lua declares allow-oom); let more than the 1 s lease pass.
	time.Sleep(1500 * time.Millisecond)
	totalBefore := up.Total()

	// The duplicate on the other instance comes first, before that instance
	// has seen the store fail (it would then hold takeovers back by itself).
	// The duplicate of the running call is answered from a read, as with
	// memory (409 here, concurrent: conflict); new keys need a claim: 503.
	for _, req := range []struct {
		gate   *Gate
		name   string
		key    string
		status int
		kind   string
	}{
		{b, "B", "full", 409, "request-in-progress"}, {a, "A", "full", 409, "request-in-progress"},
		{a, "A", "fresh-a", 503, "store-unavailable"}, {b, "B", "fresh-b", 503, "store-unavailable"},
	} {
		ans := postTimeout(15*time.Second, req.gate.URL+"/v1/orders", "alice", req.key, "{}")
		if !ans.isProblem(req.status, req.kind) {
			t.Errorf("key %s on instance %s with Valkey full: %v, want %d %s", req.key, req.name, ans, req.status, req.kind)
		}
	}
	// A completed record needs no write: it replays while Valkey is full
	// (TestFaultValkeyFullReplaysCompleted).
	for _, g := range []*Gate{a, b} {
		if ans := postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "done", "{}"); !ans.replayed() || !bytes.Equal(ans.Body, done.Body) {
			t.Errorf("key done on %s with Valkey full: %v, want a replay of %s", g.URL, ans, done.Body)
		}
	}
	if n := up.Calls("alice", "full"); n != 1 {
		t.Fatalf("upstream executed key full %d times while Valkey was full, want 1: the claim was taken over", n)
	}
	if got := up.Total() - totalBefore; got != 0 {
		t.Fatalf("%d keyed requests reached the upstream while Valkey was full", got)
	}

	// The held call ends while Valkey is still full: its client gets the
	// response, and the instance keeps trying to record it.
	unblock()
	orig := <-first
	if orig.Status != 201 || orig.replayed() {
		t.Fatalf("the original request: %v, want its forwarded 201", orig)
	}
	free()
	var retry Answer
	eventually(t, 20*time.Second, "key full to be answered after memory was freed", func() bool {
		retry = postTimeout(15*time.Second, b.URL+"/v1/orders", "alice", "full", "{}")
		return retry.Status != 503 && retry.Status != 409
	})
	if !retry.replayed() || !bytes.Equal(retry.Body, orig.Body) {
		t.Fatalf("retry of key full on instance B after memory was freed: %v, want a replay of %s", retry, orig.Body)
	}
	if ans := mustPost(t, a.URL+"/v1/orders", "alice", "done", "{}"); !ans.replayed() || !bytes.Equal(ans.Body, done.Body) {
		t.Fatalf("retry of key done after memory was freed: %v, want a replay of %s", ans, done.Body)
	}
	for _, key := range []string{"fresh-a", "fresh-b"} {
		if ans := mustPost(t, b.URL+"/v1/orders", "alice", key, "{}"); ans.Status != 201 || ans.replayed() {
			t.Fatalf("key %s after memory was freed: %v, want a forwarded 201", key, ans)
		}
	}
	for key, want := range map[string]int{"full": 1, "done": 1, "fresh-a": 1, "fresh-b": 1} {
		if n := up.Calls("alice", key); n != want {
			t.Errorf("upstream executed key %s %d times, want %d", key, n, want)
		}
	}
}

// Scenario 8c: Valkey is full (maxmemory-policy noeviction). New claims
// need a write and are refused, but a completed operation's record needs
// none: its retries replay, byte for byte, on the instance that recorded
// it and on one that never saw it (the store answers them from a read,
// valkey.Store.Claim), while a different request with the same key is
// still refused as reused (422), the same key sent by another owner is
// another record and fails closed like every new key (503, nothing
// forwarded), and a duplicate of a call still running is answered as
// with memory (TestFaultValkeyFullFailsClosed).
func TestFaultValkeyFullReplaysCompleted(t *testing.T) {
	v := startFillableValkey(t)
	up := startUpstream(t)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, Routes: ordersRoute("lease: 2s")}
	a, b := startGate(t, c), startGate(t, c)
	done := mustPost(t, a.URL+"/v1/orders", "alice", "done", `{"n":1}`)
	if done.Status != 201 || done.replayed() {
		t.Fatalf("before Valkey is full: %v", done)
	}

	free := v.Fill(t)
	defer free()
	totalBefore := up.Total()
	for _, g := range []*Gate{a, b} {
		// A new key first: the instance has now seen the store fail, so
		// what follows is claimed (no answer from the replay cache).
		if ans := postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "fresh", `{"n":1}`); !ans.isProblem(503, "store-unavailable") {
			t.Errorf("a new key on %s with Valkey full: %v, want 503 store-unavailable", g.URL, ans)
		}
		for i := range 2 {
			ans := postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "done", `{"n":1}`)
			if ans.Status != 201 || !ans.replayed() || !bytes.Equal(ans.Body, done.Body) ||
				ans.Header.Get("Location") != done.Header.Get("Location") ||
				!slices.Equal(ans.Header.Values("Set-Cookie"), done.Header.Values("Set-Cookie")) {
				t.Errorf("retry %d of the completed key on %s with Valkey full: %v %v, want a replay of %s %v",
					i+1, g.URL, ans, ans.Header, done.Body, done.Header)
			}
		}
		if ans := postTimeout(15*time.Second, g.URL+"/v1/orders", "alice", "done", `{"n":2}`); !ans.isProblem(422, "key-reused") {
			t.Errorf("another body with the completed key on %s with Valkey full: %v, want 422 key-reused", g.URL, ans)
		}
		if ans := postTimeout(15*time.Second, g.URL+"/v1/orders", "bob", "done", `{"n":1}`); !ans.isProblem(503, "store-unavailable") {
			t.Errorf("the completed key sent by another owner on %s with Valkey full: %v, want 503 store-unavailable", g.URL, ans)
		}
	}
	if got := up.Total() - totalBefore; got != 0 {
		t.Fatalf("%d keyed requests reached the upstream while Valkey was full", got)
	}

	free()
	for owner, key := range map[string]string{"alice": "fresh", "bob": "done"} {
		if ans := mustPost(t, b.URL+"/v1/orders", owner, key, `{"n":1}`); ans.Status != 201 || ans.replayed() {
			t.Fatalf("owner %s key %s after memory was freed: %v, want a forwarded 201", owner, key, ans)
		}
	}
	for id, want := range map[[2]string]int{{"alice", "done"}: 1, {"alice", "fresh"}: 1, {"bob", "done"}: 1} {
		if n := up.Calls(id[0], id[1]); n != want {
			t.Errorf("upstream executed owner %s key %s %d times, want %d", id[0], id[1], n, want)
		}
	}
}

// Scenario 8b (found by adversarial testing): Valkey stays full for
// longer than the lease of a call in flight, and the duplicate arrives at an
// instance that sent nothing during the outage, the moment memory is freed.
// That instance has no reason to hold takeovers back, so the holder's lease
// itself must still be alive: its heartbeat (extend.lua, allow-oom) runs on
// a full Valkey. The duplicate waits and gets the replay; the operation runs
// once.
func TestFaultValkeyFullLongerThanLeaseNoTakeover(t *testing.T) {
	v := startFillableValkey(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 8)
	up.Set(nil, 3*time.Second, entered)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, UpTimeout: "10s",
		Routes: ordersRoute("lease: 1s", "wait_timeout: 10s")}
	a := startGate(t, c)
	first := make(chan Answer, 1)
	go func() { first <- postTimeout(30*time.Second, a.URL+"/v1/orders", "alice", "oom-1", "{}") }()
	waitEntered(t, entered, 10*time.Second)
	free := v.Fill(t)
	defer free()
	// B starts during the outage and sends nothing until memory is freed.
	b := startGate(t, c)
	orig := <-first // answered at once; its Complete is refused and retried in the background
	if orig.Status != 201 {
		t.Fatalf("the original request: %v", orig)
	}
	time.Sleep(1500 * time.Millisecond) // more than the lease, still full
	up.Set(nil, 0, entered)
	free()
	dup := postTimeout(30*time.Second, b.URL+"/v1/orders", "alice", "oom-1", "{}")
	if dup.Status != 201 || !dup.replayed() || !bytes.Equal(dup.Body, orig.Body) {
		t.Errorf("duplicate on B right after memory was freed: %v, want a replay of %s", dup, orig.Body)
	}
	if n := up.Calls("alice", "oom-1"); n != 1 {
		t.Fatalf("upstream executed oom-1 %d times, want 1: the claim was taken over", n)
	}
}
