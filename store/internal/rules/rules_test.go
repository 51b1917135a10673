package rules

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestClaimTable decides Claim on every kind of live record at now =
// 1000 ms: what it answers, and what it writes. The contract suite checks
// the same rules on the stores; this names each case once.
func TestClaimTable(t *testing.T) {
	const now = 1000
	id := store.Identity{Owner: "o", Scope: "s", Key: "k"}
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "mine", Lease: 100 * time.Millisecond, Retention: time.Second}
	resp := &store.Response{Status: 201}
	running := func(token, fp string, leaseEnd int64) *Record {
		return &Record{ID: id, Running: true, Token: token, Fingerprint: fp, CreatedMs: 500, LeaseEndMs: leaseEnd, ExpiryMs: 5000, RetentionMs: 1000}
	}
	for _, tc := range []struct {
		name     string
		cur      *Record
		p        func(store.ClaimParams) store.ClaimParams
		want     store.State
		takeover bool
		writes   bool
		leaseEnd int64
	}{
		{name: "absent", want: store.Claimed, writes: true, leaseEnd: 1100},
		{name: "running, within its lease", cur: running("other", "fp", 1001), want: store.Running, leaseEnd: 1001},
		{name: "running, lease over, same fingerprint", cur: running("other", "fp", 1000), want: store.Claimed, takeover: true, writes: true, leaseEnd: 1100},
		{name: "running, lease over, other fingerprint", cur: running("other", "fp2", 900), want: store.Abandoned, leaseEnd: 900},
		{name: "running, lease over, no takeover", cur: running("other", "fp", 900), p: func(p store.ClaimParams) store.ClaimParams { p.NoTakeover = true; return p }, want: store.Abandoned, leaseEnd: 900},
		{name: "repeated token", cur: running("mine", "fp", 900), want: store.Claimed, writes: true, leaseEnd: 1100},
		{name: "completed", cur: &Record{ID: id, Fingerprint: "fp", Resp: resp}, want: store.Completed},
		{name: "gone", cur: &Record{ID: id, Gone: true}, want: store.Gone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			if tc.p != nil {
				q = tc.p(p)
			}
			res, next := Claim(tc.cur, q, now)
			if res.State != tc.want || res.Takeover != tc.takeover || (next != nil) != tc.writes {
				t.Fatalf("Claim = %+v, writes %v; want %v, takeover %v, writes %v", res, next != nil, tc.want, tc.takeover, tc.writes)
			}
			if tc.leaseEnd != 0 && !res.LeaseEnd.Equal(Time(tc.leaseEnd)) {
				t.Fatalf("lease end %v, want %v", res.LeaseEnd, Time(tc.leaseEnd))
			}
			if !tc.writes {
				if a, ok := Answer(tc.cur, q, now); !ok || a.State != res.State {
					t.Fatalf("Answer = %+v, %v; want Claim's answer without a write", a, ok)
				}
			}
			if tc.want == store.Completed && res.Response != resp {
				t.Fatal("a completed answer does not carry the record's response")
			}
		})
	}
}

// TestExpiries: a running record with retention 0 lives store.AbandonedKeep
// past its lease end (Claim and Extend); with a retention, the later of
// lease end and claim time + retention; a completed one, now + retention
// or never.
func TestExpiries(t *testing.T) {
	keep := store.AbandonedKeep.Milliseconds()
	if got := RunningExpiry(1000, 1100, 0); got != 1100+keep {
		t.Fatalf("RunningExpiry retention 0 = %d, want %d", got, 1100+keep)
	}
	if got := RunningExpiry(1000, 1100, 50); got != 1100 {
		t.Fatalf("RunningExpiry lease past retention = %d, want 1100", got)
	}
	if got := RunningExpiry(1000, 1100, 500); got != 1500 {
		t.Fatalf("RunningExpiry = %d, want 1500", got)
	}
	r := &Record{Running: true, Token: "t", LeaseEndMs: 1100, ExpiryMs: 1100 + keep}
	Extend(r, time.Second, 2000)
	if r.LeaseEndMs != 3000 || r.ExpiryMs != 3000+keep {
		t.Fatalf("Extend, retention 0: %+v", r)
	}
	Complete(r, &store.Response{Status: 200}, 4000)
	if r.Running || r.Token != "" || r.LeaseEndMs != 0 || r.ExpiryMs != 0 || r.StoredAtMs != 4000 || !r.Resp.StoredAt.Equal(Time(4000)) {
		t.Fatalf("Complete, retention 0: %+v", r)
	}
	if Holds(r, "t") || !Indexable(r) || !Tombstoned(r, 4000) || Tombstoned(r, 3999) {
		t.Fatalf("completed record: Holds %v, Indexable %v, Tombstoned %v", Holds(r, "t"), Indexable(r), Tombstoned(r, 4000))
	}
	if g := Tombstone(r); !g.Gone || g.Resp != nil || g.Fingerprint != "" || Indexable(g) {
		t.Fatalf("Tombstone = %+v", g)
	}
	if !Over(5, 5) || Over(6, 5) || Over(0, 5) {
		t.Fatal("Over: end <= now is over, 0 never is")
	}
}
