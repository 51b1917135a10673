package main

import (
	"testing"
	"time"
)

// flatOptions are the options of the brief flat-cost runs: target D only,
// no load workloads, no storm of the default kind, no idle connections.
func flatOptions(workload string) options {
	return options{
		rounds: 1, concurrency: 8, workloads: []string{workload}, targets: "D", logLevel: "info",
		scaleSizes: []int{0, 10_000}, scaleSamples: 200, scaleConc: 8, scaleSettle: 100 * time.Millisecond,
		waiters: 500, waitersSmall: 100, waitersDelay: 2 * time.Second,
	}
}

// TestBenchScale runs the scale workload briefly (0 and 10,000 records)
// and checks what must hold on any machine: the filled records are
// real completed records (a claim of one replays the upstream's body),
// every claim answers as it must (fresh keys Claimed), Valkey holds the
// records while they are measured and loses them when deleted. Latencies
// are reported, never asserted.
func TestBenchScale(t *testing.T) {
	o := flatOptions(wScale)
	rep := runBrief(t, o)
	res := rep.scale
	if res == nil || len(res.rows) != len(o.scaleSizes)+1 {
		t.Fatalf("scale rows: %+v, want one per size and the control after deleting", res)
	}
	for _, x := range res.rows {
		for side, k := range map[string]scaleKinds{"D": x.d, "reference": x.ref} {
			for name, l := range map[string]*scaleLat{"fresh": k.serial, "fresh concurrent": k.conc, "replay": k.replay} {
				if l.errors != 0 || len(l.lat) != o.scaleSamples {
					t.Errorf("%s on %s at %s: %d errors (first: %s), %d of %d samples", name, side, x.label, l.errors, l.firstErr, len(l.lat), o.scaleSamples)
				}
			}
		}
	}
	full, after := res.rows[1], res.rows[2]
	if full.records != 10_000 || full.filled != 10_000 || full.dbsize < 10_000 {
		t.Errorf("row %s: %d records filled, DBSIZE %d, want 10,000 and at least that many keys", full.label, full.filled, full.dbsize)
	}
	// Each row adds its fresh claims (warm-up, one at a time, concurrent).
	if after.dbsize > full.dbsize-10_000+int64(200+2*o.scaleSamples) {
		t.Errorf("DBSIZE %d after deleting, %d before: the filled records were not deleted", after.dbsize, full.dbsize)
	}
	if res.bytesPerRecord <= 0 || res.recordLen == 0 {
		t.Errorf("used_memory per record %.0f, record string %d bytes: want both measured", res.bytesPerRecord, res.recordLen)
	}
	if md := rep.markdown(); len(md) == 0 {
		t.Error("empty report")
	}
}

// TestBenchWaiters runs the waiters workload briefly (storms of 100 and
// 500 requests with one key, half on each of two idemgate instances) and
// checks the properties: every request answered 2xx, exactly one upstream
// call, every other request a replay, the Valkey commands of each
// instance attributed to it, at most two claims per request, and no store
// operation other than claims that grows with the number of waiters.
func TestBenchWaiters(t *testing.T) {
	o := flatOptions(wWaiters)
	rep := runBrief(t, o)
	res := rep.waiters
	if res == nil || len(res.storms) != 2 {
		t.Fatalf("waiters: %+v, want two storms", res)
	}
	for _, st := range res.storms {
		if st.s.errors != 0 || st.s.upstreamCalls != 1 || st.s.replayed != st.n-1 || st.s.codes[201] != st.n {
			t.Errorf("storm of %d: %d errors (first: %s), %d upstream calls, %d replays, statuses %v; want none, 1, %d, all 201",
				st.n, st.s.errors, st.s.firstErr, st.s.upstreamCalls, st.s.replayed, st.s.codes, st.n-1)
		}
		for _, in := range st.inst {
			if in.valkeyCmds <= 0 || in.storeOps["claim"] < int64(in.waiters)-1 || in.storeOps["claim"] > 2*int64(in.waiters) {
				t.Errorf("storm of %d, instance %s: %d Valkey commands, store ops %v for %d requests; want commands counted and 1 to 2 claims per request",
					st.n, in.name, in.valkeyCmds, in.storeOps, in.waiters)
			}
		}
	}
	small, big := res.storms[0], res.storms[1]
	for i := range big.inst {
		if b, s := big.inst[i].nonClaimOps(), small.inst[i].nonClaimOps(); b > s+2 {
			t.Errorf("instance %s: %d store operations other than claims for %d waiters, %d for %d: they grow with the waiters",
				big.inst[i].name, b, big.n, s, small.n)
		}
	}
	if md := rep.markdown(); len(md) == 0 {
		t.Error("empty report")
	}
}
