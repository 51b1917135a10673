package e2e

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// startedRE finds the start time and age in an outcome-unknown detail.
var startedRE = regexp.MustCompile(`started at (\S+) \((\S+) ago\)`)

// checkOutcomeUnknown fails unless a is the 409 outcome-unknown answer to
// a retry of a call that started at about sent: its detail names the start
// as RFC 3339 and its age, and says its outcome cannot be known.
func checkOutcomeUnknown(t *testing.T, what string, a Answer, sent time.Time) {
	t.Helper()
	if !a.isProblem(409, "outcome-unknown") {
		t.Fatalf("%s: %v, want 409 outcome-unknown", what, a)
	}
	var p struct {
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(a.Body, &p); err != nil {
		t.Fatal(err)
	}
	m := startedRE.FindStringSubmatch(p.Detail)
	if m == nil || !strings.Contains(p.Detail, "cannot be known") {
		t.Fatalf("%s: detail %q does not say when the call started and that its outcome cannot be known", what, p.Detail)
	}
	started, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("%s: start %q is not RFC 3339: %v", what, m[1], err)
	}
	if d := started.Sub(sent); d < -time.Second || d > 2*time.Second {
		t.Fatalf("%s: detail says the call started at %v, it was sent at %v", what, started, sent)
	}
	if age, err := time.ParseDuration(m[2]); err != nil || age < 0 {
		t.Fatalf("%s: age %q: %v", what, m[2], err)
	}
}

// outcomeUnknownUntilPurged checks what the default (on_abandoned: reject)
// does with a call on route orders whose outcome is unknown, once its lease
// has ended: every retry gets outcome-unknown and nothing is forwarded;
// idemgate admin get shows the abandoned record and its age; idemgate
// admin purge lets the next retry run once more, and the one after it
// replays. The gate's admin token must be testAdminToken.
func outcomeUnknownUntilPurged(t *testing.T, g *Gate, up *Upstream, key, body string, sent time.Time) {
	t.Helper()
	for i := range 2 {
		a := mustPost(t, g.URL+"/v1/orders", "alice", key, body)
		checkOutcomeUnknown(t, "retry after the lease", a, sent)
		if i == 0 && a.Header.Get("Retry-After") != "" {
			t.Errorf("terminal outcome-unknown carries Retry-After %q", a.Header.Get("Retry-After"))
		}
	}
	if n := up.Calls("alice", key); n != 1 {
		t.Fatalf("upstream executed %d times before the purge, want 1", n)
	}
	admin := []string{"--admin-url", g.AdminURL, "--route", "orders", "--owner-value", "alice", "--key", key}
	out, errOut, code := runAdmin(t, append([]string{"get"}, admin...)...)
	var rec struct {
		State      string   `json:"state"`
		CreatedAt  string   `json:"created_at"`
		AgeSeconds *float64 `json:"age_seconds"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.State != "abandoned" || rec.AgeSeconds == nil ||
		*rec.AgeSeconds < time.Since(sent).Seconds()-2 || *rec.AgeSeconds > time.Since(sent).Seconds()+1 {
		t.Fatalf("idemgate admin get: exit %d\n%s%s\nwant the abandoned record and its age (%v)", code, out, errOut, time.Since(sent))
	}
	if out, errOut, code := runAdmin(t, append([]string{"purge"}, admin...)...); code != 0 || strings.TrimSpace(out) != "purged" {
		t.Fatalf("idemgate admin purge: exit %d\n%s%s", code, out, errOut)
	}
	a := mustPost(t, g.URL+"/v1/orders", "alice", key, body)
	if a.Status != 201 || a.replayed() {
		t.Fatalf("retry after the purge: %v, want a forwarded 201", a)
	}
	if b := mustPost(t, g.URL+"/v1/orders", "alice", key, body); !b.replayed() || !bytes.Equal(a.Body, b.Body) {
		t.Fatalf("retry after the re-forward: %v, want a replay", b)
	}
	if n := up.Calls("alice", key); n != 2 {
		t.Fatalf("upstream executed %d times, want 2 (the call of unknown outcome + the one the operator allowed)", n)
	}
}

// An upstream that does not answer within upstream.timeout: the client
// gets 504 upstream-timeout, the upstream may still have acted (here it
// does), so the key stays claimed until its lease ends. Then the default
// (on_abandoned: reject) answers outcome-unknown until an operator purges
// the key; on_abandoned: takeover forwards the retry again (twice in all,
// the documented cost).
func TestFaultUpstreamTimeoutOutcomeUnknown(t *testing.T) {
	for _, mode := range []string{"default", "takeover"} {
		t.Run(mode, func(t *testing.T) {
			v := valkeytest.Start(t)
			up := startUpstream(t)
			entered := make(chan struct{}, 4)
			up.Set(nil, 1500*time.Millisecond, entered)
			settings := []string{"lease: 1s"}
			if mode == "takeover" {
				settings = append(settings, "on_abandoned: takeover")
			}
			// wait_timeout may not exceed upstream.timeout.
			g := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: testAdminToken,
				UpTimeout: "1s", Routes: ordersRoute(settings...)},
				func(doc string) string { return strings.Replace(doc, "wait_timeout: 10s", "wait_timeout: 1s", 1) })
			const key, body = "timeout-1", `{"n":1}`
			sent := time.Now()
			if a := mustPost(t, g.URL+"/v1/orders", "alice", key, body); !a.isProblem(504, "upstream-timeout") {
				t.Fatalf("first call: %v, want 504 upstream-timeout", a)
			}
			waitEntered(t, entered, time.Second)
			up.Set(nil, 0, nil)
			// The retry waits (concurrent: wait) for the lease to end, then
			// gets the route's lease-end decision.
			retry := mustPost(t, g.URL+"/v1/orders", "alice", key, body)
			if mode == "default" {
				checkOutcomeUnknown(t, "retry after the timeout", retry, sent)
				outcomeUnknownUntilPurged(t, g, up, key, body, sent)
				return
			}
			if retry.Status != 201 || retry.replayed() {
				t.Fatalf("retry after the timeout: %v, want a forwarded 201 (takeover)", retry)
			}
			if again := mustPost(t, g.URL+"/v1/orders", "alice", key, body); !again.replayed() || !bytes.Equal(again.Body, retry.Body) {
				t.Fatalf("second retry: %v, want a replay of the takeover's response", again)
			}
			if n := up.Calls("alice", key); n != 2 {
				t.Fatalf("upstream executed %d times, want 2 (the timed-out call + the takeover)", n)
			}
		})
	}
}

// With wait_timeout equal to the lease (the defaults' relationship, 10 s
// each; here 2 s each), the instance holding a call is SIGKILLed and the
// client retries at once, on a second instance and on the restarted one:
// each retry waits just as long as the dead holder's lease still runs, so
// it must get the lease-end decision (outcome-unknown, by default) in one
// attempt, not 409 request-in-progress that sends the client back once
// more.
func TestFaultRetryAtOnceAfterCrashGetsLeaseEndDecision(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 4)
	up.Set(nil, 4*time.Second, entered)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: testAdminToken,
		Routes: ordersRoute("lease: 2s", "wait_timeout: 2s")}
	a, b := startGate(t, c), startGate(t, c)
	const key, body = "crash-at-once", `{"n":3}`

	first := make(chan Answer, 1)
	sent := time.Now()
	go func() { first <- postTimeout(20*time.Second, a.URL+"/v1/orders", "alice", key, body) }()
	waitEntered(t, entered, 10*time.Second)
	a.Kill()
	if r := <-first; r.Err == nil {
		t.Fatalf("the client of the killed instance got an answer: %v", r)
	}
	answers := make([]Answer, 2)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		answers[0] = postTimeout(20*time.Second, b.URL+"/v1/orders", "alice", key, body)
	}()
	a.Start()
	answers[1] = postTimeout(20*time.Second, a.URL+"/v1/orders", "alice", key, body)
	wg.Wait()
	for i, where := range []string{"the second instance", "the restarted instance"} {
		t.Logf("retry on %s: %v", where, answers[i])
		checkOutcomeUnknown(t, "the one retry on "+where, answers[i], sent)
	}
	if n := up.Calls("alice", key); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// Retry-After on 409 request-in-progress is the short fixed hint (1 s),
// not the holder's remaining lease (which a live holder keeps pushing a
// lease ahead: 10 s for a call that ends a second later), both on a
// concurrent: conflict route and after a wait that reached wait_timeout.
func TestInProgressRetryAfterIsAShortHint(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	entered := make(chan struct{}, 4)
	up.Set(nil, 3*time.Second, entered)
	routes := ordersRoute("lease: 10s", "concurrent: conflict") +
		"  - name: waits\n    match: \"POST /v1/waits\"\n    lease: 10s\n    wait_timeout: 1s\n"
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, Routes: routes})
	for _, path := range []string{"/v1/orders", "/v1/waits"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			first := make(chan Answer, 1)
			key := "hint" + path
			go func() { first <- postTimeout(20*time.Second, g.URL+path, "alice", key, `{}`) }()
			waitEntered(t, entered, 10*time.Second)
			dup := mustPost(t, g.URL+path, "alice", key, `{}`)
			if !dup.isProblem(409, "request-in-progress") || dup.Header.Get("Retry-After") != "1" {
				t.Fatalf("duplicate while the call runs: %v Retry-After %q, want 409 request-in-progress with Retry-After 1",
					dup, dup.Header.Get("Retry-After"))
			}
			if r := <-first; r.Status != 201 {
				t.Fatalf("first call: %v", r)
			}
		})
	}
}
