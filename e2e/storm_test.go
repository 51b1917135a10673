package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// stormFull selects the full storm of the issue (10,000 requests over 7,000
// (owner, key) pairs); without it CI runs a smaller one.
var stormFull = flag.Bool("storm.full", false, "run the full 10,000-request storm instead of the CI-sized one")

// stormSeed makes the schedule (pairs, duplicates, instance per request)
// reproducible; the interleaving itself is up to the scheduler.
const stormSeed = 20240501

// stormCall is one execution seen by the storm's upstream.
type stormCall struct {
	order int
	gate  string // X-Forwarded-Host: the instance that forwarded it
	start time.Time
}

// stormUpstream counts executions per (owner, key) and answers 201 with a
// body naming the owner, the key and a global order number, so every answer
// can be traced back to the execution that produced it.
type stormUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	n     int
	calls map[string][]stormCall
}

func startStormUpstream(t *testing.T) *stormUpstream {
	u := &stormUpstream{calls: map[string][]stormCall{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		owner, key := r.Header.Get("X-User"), r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.n++
		n := u.n
		u.calls[owner+"|"+key] = append(u.calls[owner+"|"+key], stormCall{order: n, gate: r.Header.Get("X-Forwarded-Host"), start: time.Now()})
		u.mu.Unlock()
		time.Sleep(time.Duration(n%7) * 2 * time.Millisecond) // widen the race windows a little
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d,"owner":%q,"key":%q}`, n, owner, key)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *stormUpstream) snapshot() map[string][]stormCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string][]stormCall, len(u.calls))
	for k, v := range u.calls {
		out[k] = append([]stormCall(nil), v...)
	}
	return out
}

// stormPair is one (owner, idempotency key); pairs share key names across
// owners (and the body), so a broken owner scope would replay one owner's
// response to another.
type stormPair struct{ owner, key, body string }

func (p stormPair) id() string { return p.owner + "|" + p.key }

type stormAttempt struct {
	pair  int
	gate  int
	class string
	order int // order of the execution a 201 came from
	at    time.Time
}

// stormStats is the outcome of one storm, for the report table.
type stormStats struct {
	scheduled, sent, pairs int
	byClass                map[string]int
	cleanPairs             int // first execution reached a client
	ambiguousPairs         int // first execution's response reached nobody
	dupClean               int // clean pairs executed more than once (must be 0)
	dupAmbiguous           int // ambiguous pairs executed more than once
	crossOwner             int
	inconsistent           int // pairs whose 201 answers carry different bodies
	lostCompleted          int // pairs answered 201 during the storm but not replayed after
	forwardsStoreDown      int
	verifyByClass          map[string]int
}

func TestStorm(t *testing.T) {
	requests, pairs := 3000, 2100
	if *stormFull {
		requests, pairs = 10000, 7000
	}
	for _, mode := range []string{"takeover", "reject"} {
		t.Run("on_abandoned="+mode, func(t *testing.T) {
			logStorm(t, "on_abandoned="+mode, runStorm(t, requests, pairs, mode, valkeyStorm))
		})
	}
	// Layout 5 with takeover: the mode whose late completions find another
	// instance's record, which layout 5 puts back in its completion script.
	t.Run("layout5/on_abandoned=takeover", func(t *testing.T) {
		layout5 := func(t *testing.T, c gateConfig) stormFaults {
			c.ValkeyExtra = "    layout: 5\n"
			return valkeyStorm(t, c)
		}
		logStorm(t, "layout 5, on_abandoned=takeover", runStorm(t, requests, pairs, "takeover", layout5))
	})
}

// TestStormSentinel runs the storm of TestStorm on a Sentinel set with
// acks.replicas 1 (sentinelStorm), whose primary is SIGKILLed at a third
// and replaced by a replica: no pair whose first execution reached a
// client runs twice, and no completed record is lost with the primary.
// on_abandoned: takeover, as TestStormPostgres.
func TestStormSentinel(t *testing.T) {
	requests, pairs := 3000, 2100
	if *stormFull {
		requests, pairs = 10000, 7000
	}
	logStorm(t, "on Sentinel, acks.replicas 1, primary killed", runStorm(t, requests, pairs, "takeover", sentinelStorm))
}

// logStorm logs the figures of one storm, for docs/durability.md.
func logStorm(t *testing.T, name string, st stormStats) {
	t.Helper()
	t.Logf("storm %s: scheduled %d, sent %d (with client retries), pairs %d", name, st.scheduled, st.sent, st.pairs)
	t.Logf("answers by class: %v", sortedCounts(st.byClass))
	t.Logf("pairs whose first execution completed: %d, duplicate executions among them: %d", st.cleanPairs, st.dupClean)
	t.Logf("pairs whose first execution was cut by the SIGKILL: %d, executed twice: %d", st.ambiguousPairs, st.dupAmbiguous)
	t.Logf("cross-owner replays: %d, inconsistent 201 bodies: %d, lost completed records: %d, forwards while the store was down: %d",
		st.crossOwner, st.inconsistent, st.lostCompleted, st.forwardsStoreDown)
	t.Logf("verification pass by class: %v", sortedCounts(st.verifyByClass))
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// stormClass names the class of one answer: original, replay, a problem
// type, or connection-error; "" means unclassified.
func stormClass(a Answer) string {
	switch {
	case a.Err != nil:
		return "connection-error"
	case a.Status == 201 && a.replayed():
		return "replay"
	case a.Status == 201:
		return "original"
	case a.Header.Get("Content-Type") == "application/problem+json":
		if k := problemType(a.Body); k != "" {
			return k
		}
	}
	return ""
}

// retryable reports whether a client should send the same request again.
func retryable(class string) bool {
	switch class {
	case "connection-error", "store-unavailable", "request-in-progress", "upstream-failed", "upstream-timeout", "upstream-unreachable":
		return true
	}
	return false
}

// stormStore starts the store the storm runs on, durable across a crash,
// and returns the gate config pointing at it with its faults.
type stormStore func(t *testing.T, c gateConfig) stormFaults

// stormFaults is what a stormStore returns: the gate config and the crash
// the storm inflicts on the store at a third of its run.
type stormFaults struct {
	config gateConfig
	// kill crashes the store (kill -9) and returns when it did. It
	// returns noPrimaryUntil zero when the store stays down until restart;
	// a set that fails over by itself returns once it has a new primary,
	// with the last moment it was still seen without one.
	kill func() (killed, noPrimaryUntil time.Time)
	// restart starts the crashed server again (a failed-over set's old
	// primary returns as a replica).
	restart func()
}

// valkeyStorm is Valkey with AOF and appendfsync always.
func valkeyStorm(t *testing.T, c gateConfig) stormFaults {
	v := valkeytest.Start(t, valkeytest.WithAOF())
	c.ValkeyAddrs = []string{v.Addr()}
	return stormFaults{config: c, kill: func() (time.Time, time.Time) { now := time.Now(); v.Kill(); return now, time.Time{} }, restart: v.Restart}
}

// sentinelStormCut is how long replication is cut before the storm's
// primary kill on Sentinel: a SIGKILL alone loses nothing on loopback (the
// kernel still delivers what the primary had written to its replicas), so
// without the cut the storm could not tell acks from no acks.
const sentinelStormCut = 500 * time.Millisecond

// sentinelStorm is the Sentinel set of TestFaultSentinelFailover (a
// primary, two replicas behind a relay, one sentinel) with acks.replicas 1
// and no persistence: what keeps acknowledged writes across the crash is
// the replicas. The crash cuts replication for sentinelStormCut (the
// primary keeps answering, nothing reaches the replicas), then SIGKILLs the
// primary; the sentinel promotes a replica that never saw the cut's writes,
// and the restarted old primary comes back empty and is turned into a
// replica of the new one. Without acks the completions written during the
// cut are lost and their pairs run again (the storm fails).
func sentinelStorm(t *testing.T, c gateConfig) stormFaults {
	set := startSentinelSet(t)
	c.ValkeyAddrs = []string{set.sentinel.Addr()}
	c.ValkeyExtra = fmt.Sprintf("    sentinel_master: %q\n    acks: {replicas: 1, timeout: 500ms}\n", set.sentinel.MasterName)
	old := fmt.Sprint(set.primary.Port())
	kill := func() (time.Time, time.Time) {
		set.relay.Set(relayBlackhole, 0)
		time.Sleep(sentinelStormCut)
		killed := time.Now()
		set.primary.Kill()
		set.relay.Set(relayPass, 0) // the relay's target is gone; replicas are re-pointed directly
		var lastSeenOld time.Time
		eventually(t, 30*time.Second, "the sentinel to promote a replica", func() bool {
			asked := time.Now()
			out, err := set.sentinel.CLI("SENTINEL", "get-master-addr-by-name", set.sentinel.MasterName)
			if err != nil || strings.Contains(out, old) {
				// Named the dead primary when asked: any switch
				// came after this moment.
				lastSeenOld = asked
				return false
			}
			return true
		})
		t.Logf("sentinel promoted a replica %v after the kill (seen without a new primary until %v after it)",
			time.Since(killed), lastSeenOld.Sub(killed))
		return killed, lastSeenOld
	}
	return stormFaults{config: c, kill: kill, restart: set.primary.Restart}
}

func runStorm(t *testing.T, requests, npairs int, onAbandoned string, storeUnder stormStore) stormStats {
	const (
		workers     = 64
		maxAttempts = 12
		lease       = 5 * time.Second
		// valkeyDown is longer than the store timeout (2 s), so requests
		// really fail closed, and shorter than the lease: an outage longer
		// than the lease lets a retry take over a live claim that could not
		// be extended meanwhile (docs/durability.md).
		valkeyDown = 3 * time.Second
	)
	start := time.Now()
	rng := rand.New(rand.NewPCG(stormSeed, 1))
	pairs := make([]stormPair, npairs)
	for i := range pairs {
		// Three owners share each key name and body.
		k := fmt.Sprintf("k-%d", i/3)
		pairs[i] = stormPair{owner: fmt.Sprintf("o-%d", i%41), key: k, body: fmt.Sprintf(`{"k":%q}`, k)}
	}
	// Schedule: every pair once, the rest duplicates; half of those right
	// next to their first (racing it, often on the other instance), half
	// anywhere later.
	type item struct{ pair, gate int }
	groups := make([][]int, npairs)
	for i := range groups {
		groups[i] = []int{i}
	}
	var spread []int
	for d := 0; d < requests-npairs; d++ {
		p := rng.IntN(npairs)
		if d%2 == 0 {
			groups[p] = append(groups[p], p)
		} else {
			spread = append(spread, p)
		}
	}
	rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	var schedule []item
	for _, g := range groups {
		for _, p := range g {
			schedule = append(schedule, item{pair: p, gate: rng.IntN(2)})
		}
	}
	for _, p := range spread {
		at := rng.IntN(len(schedule) + 1)
		schedule = append(schedule[:at], append([]item{{pair: p, gate: rng.IntN(2)}}, schedule[at:]...)...)
	}

	up := startStormUpstream(t)
	faults := storeUnder(t, gateConfig{Upstream: up.URL, UpTimeout: "10s",
		Routes: ordersRoute(fmt.Sprintf("lease: %s", lease), "wait_timeout: 5s", "on_abandoned: "+onAbandoned)})
	c := faults.config
	gates := []*Gate{startGate(t, c), startGate(t, c)}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	t.Cleanup(client.CloseIdleConnections)

	send := func(p stormPair, gate int) Answer {
		req, _ := http.NewRequest("POST", gates[gate].URL+"/v1/orders", strings.NewReader(p.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", p.owner)
		req.Header.Set("Idempotency-Key", p.key)
		resp, err := client.Do(req)
		if err != nil {
			return Answer{Err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
	}

	var (
		mu       sync.Mutex
		attempts []stormAttempt
		bad      []string
	)
	record := func(pi, gate int, a Answer) string {
		cls := stormClass(a)
		at := stormAttempt{pair: pi, gate: gate, class: cls, at: time.Now()}
		var problem string
		if cls == "" {
			problem = fmt.Sprintf("unclassified answer for %s: %v", pairs[pi].id(), a)
		}
		if cls == "original" || cls == "replay" {
			var body struct {
				Order int    `json:"order"`
				Owner string `json:"owner"`
				Key   string `json:"key"`
			}
			if err := json.Unmarshal(a.Body, &body); err != nil {
				problem = fmt.Sprintf("undecodable 201 for %s: %q", pairs[pi].id(), a.Body)
			} else if body.Owner != pairs[pi].owner || body.Key != pairs[pi].key {
				at.class = "cross-owner"
			}
			at.order = body.Order
		}
		mu.Lock()
		attempts = append(attempts, at)
		if problem != "" && len(bad) < 20 {
			bad = append(bad, problem)
		}
		mu.Unlock()
		return at.class
	}

	var next, done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(schedule) {
					return
				}
				it := schedule[i]
				gate := it.gate
				backoff := 50 * time.Millisecond
				for attempt := 0; attempt < maxAttempts; attempt++ {
					cls := record(it.pair, gate, send(pairs[it.pair], gate))
					if !retryable(cls) {
						break
					}
					time.Sleep(backoff)
					backoff = min(2*backoff, time.Second)
					gate = 1 - gate // a client fails over to the other instance
				}
				done.Add(1)
			}
		}()
	}

	// Faults, from the test goroutine (they may t.Fatal): the store crashes
	// at a third of the storm and stays down valkeyDown (a set that fails
	// over serves again once a replica is promoted, and its old primary
	// returns valkeyDown later); instance 0 is SIGKILLed at two thirds and
	// restarted.
	waitDone := func(n int64) {
		for done.Load() < n && time.Since(start) < 100*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
	}
	total := int64(len(schedule))
	waitDone(total / 3)
	downFrom, downUntil := faults.kill()
	time.Sleep(valkeyDown)
	if downUntil.IsZero() {
		downUntil = time.Now() // the server is started (and answers) only after this
	}
	faults.restart()
	waitDone(2 * total / 3)
	killedAt := time.Now()
	gates[0].Kill()
	gates[0].Start()
	wg.Wait()
	stormTook := time.Since(start)

	// Verification: once every lease has ended, one more request per pair.
	time.Sleep(time.Until(killedAt.Add(lease + 200*time.Millisecond)))
	verify := make([]Answer, npairs)
	var vnext atomic.Int64
	var vwg sync.WaitGroup
	for w := 0; w < workers; w++ {
		vwg.Add(1)
		go func() {
			defer vwg.Done()
			for {
				i := int(vnext.Add(1) - 1)
				if i >= npairs {
					return
				}
				for attempt := 0; attempt < maxAttempts; attempt++ {
					verify[i] = send(pairs[i], attempt%2)
					if cls := stormClass(verify[i]); !retryable(cls) {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	vwg.Wait()
	calls := up.snapshot()
	if len(bad) > 0 {
		t.Errorf("%d problems, first: %s", len(bad), strings.Join(bad, "\n"))
	}

	st := stormStats{scheduled: len(schedule), sent: len(attempts), pairs: npairs,
		byClass: map[string]int{}, verifyByClass: map[string]int{}}
	seen := make([]map[int]bool, npairs) // execution orders that reached a client per pair
	stormOK := make([]bool, npairs)
	for _, a := range attempts {
		st.byClass[a.class]++
		switch a.class {
		case "cross-owner":
			st.crossOwner++
		case "original", "replay":
			if seen[a.pair] == nil {
				seen[a.pair] = map[int]bool{}
			}
			seen[a.pair][a.order] = true
			stormOK[a.pair] = true
		case "connection-error":
			if a.gate != 0 {
				t.Errorf("connection error on the instance that was never killed (pair %s)", pairs[a.pair].id())
			}
		}
	}
	for i, p := range pairs {
		ex := calls[p.id()]
		vcls := stormClass(verify[i])
		st.verifyByClass[vcls]++
		if len(seen[i]) > 1 {
			st.inconsistent++
		}
		if len(ex) == 0 {
			if stormOK[i] {
				t.Errorf("pair %s answered 201 without any execution", p.id())
			}
			continue
		}
		firstDone := seen[i][ex[0].order]
		if vcls == "original" || vcls == "replay" {
			var body struct{ Order int }
			_ = json.Unmarshal(verify[i].Body, &body)
			firstDone = firstDone || body.Order == ex[0].order
		}
		if firstDone {
			st.cleanPairs++
			if len(ex) > 1 {
				st.dupClean++
				t.Errorf("pair %s: first execution completed, yet executed %d times (%v)", p.id(), len(ex), ex)
			}
		} else {
			st.ambiguousPairs++
			if len(ex) > 1 {
				st.dupAmbiguous++
			}
			if onAbandoned == "reject" && len(ex) > 1 {
				t.Errorf("pair %s executed %d times with on_abandoned: reject", p.id(), len(ex))
			}
		}
		if stormOK[i] && (vcls != "replay" || !seen[i][orderOf(verify[i])]) {
			st.lostCompleted++
			t.Errorf("pair %s answered 201 during the storm, but after it: %v", p.id(), verify[i])
		}
		for _, c := range ex {
			if c.start.After(downFrom.Add(500*time.Millisecond)) && c.start.Before(downUntil) {
				st.forwardsStoreDown++
				t.Errorf("pair %s was forwarded at %v, while the store was down or had no primary (%v..%v)", p.id(), c.start, downFrom, downUntil)
			}
		}
		switch vcls {
		case "replay", "outcome-unknown":
		case "original":
			if onAbandoned == "reject" {
				t.Errorf("pair %s forwarded again in the verification pass with on_abandoned: reject", p.id())
			}
		default:
			t.Errorf("pair %s: verification answer %v", p.id(), verify[i])
		}
	}
	if st.crossOwner > 0 {
		t.Errorf("%d answers carried another owner's response", st.crossOwner)
	}
	if st.inconsistent > 0 {
		t.Errorf("%d pairs were answered 201 with different bodies", st.inconsistent)
	}
	if n := st.byClass[""]; n > 0 {
		t.Errorf("%d answers unclassified", n)
	}
	if stormTook > 110*time.Second {
		t.Errorf("the storm took %v, want under 2 minutes", stormTook)
	}
	t.Logf("storm took %v (%.0f answers/s), verification %v", stormTook, float64(len(attempts))/stormTook.Seconds(), time.Since(start)-stormTook)
	return st
}

func orderOf(a Answer) int {
	var body struct{ Order int }
	_ = json.Unmarshal(a.Body, &body)
	return body.Order
}
