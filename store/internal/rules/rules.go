// Package rules is the one rule book of the stores that decide claims in
// Go (memory and bolt): what a Claim answers and writes, when a lease or
// an expiry is over, what Complete, Extend and a tombstone leave in the
// record, and how Get reports it. The drivers only keep and find records;
// Valkey and Postgres state the same rules in their scripts and
// statements, and store/storetest checks all four against the contract in
// store/store.go.
package rules

import (
	"time"

	"github.com/idemgate/idemgate/store"
)

// Record is the state of one identity as a local store keeps it. Times
// are unix milliseconds from the store's clock; 0 means unset (the lease
// end of a completed record) or never (the expiry of a completed record
// with retention 0).
type Record struct {
	ID      store.Identity
	Running bool
	// Gone: a tombstone (Store.Index and Store.Tombstone): no fingerprint, recipe, token
	// or response, only the identity, the times and the expiry.
	Gone bool
	// Takeover: the running claim took over an abandoned one.
	Takeover    bool
	Fingerprint string
	Recipe      string
	Token       string
	CreatedMs   int64
	LeaseEndMs  int64
	ExpiryMs    int64
	RetentionMs int64
	// Resp is the stored response, set when the record is completed.
	Resp       *store.Response
	StoredAtMs int64
}

// Over reports whether an end time has been reached (end <= now); an end
// of 0 (never) never is. Contract rule 2.
func Over(endMs, nowMs int64) bool { return endMs != 0 && endMs <= nowMs }

// Time converts stored unix milliseconds to a time; 0 is the zero time.
func Time(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// RunningExpiry is when a running record stops existing (contract rule
// 6): the later of its lease end and claim time + retention, or lease end
// + store.AbandonedKeep for retention 0.
func RunningExpiry(nowMs, leaseEndMs, retentionMs int64) int64 {
	if retentionMs == 0 {
		return leaseEndMs + store.AbandonedKeep.Milliseconds()
	}
	return max(nowMs+retentionMs, leaseEndMs)
}

// Answer is Claim's answer for a live record r that it must not replace,
// made without writing (bolt answers it from a read transaction); ok is
// false when the claim writes: a takeover, or a repeated claim whose
// lease restarts. The answer's Response is r.Resp itself.
func Answer(r *Record, p store.ClaimParams, nowMs int64) (res store.ClaimResult, ok bool) {
	switch {
	case r.Gone:
		return store.ClaimResult{State: store.Gone}, true
	case !r.Running:
		return store.ClaimResult{State: store.Completed, Fingerprint: r.Fingerprint, Recipe: r.Recipe, Response: r.Resp}, true
	case r.Token == p.Token:
		// A retried claim whose first answer was lost: it holds the
		// record, and its lease restarts (Claim).
		return store.ClaimResult{}, false
	case !Over(r.LeaseEndMs, nowMs):
		return store.ClaimResult{State: store.Running, Fingerprint: r.Fingerprint, Recipe: r.Recipe, LeaseEnd: Time(r.LeaseEndMs)}, true
	case p.NoTakeover || r.Fingerprint != p.Fingerprint:
		return store.ClaimResult{State: store.Abandoned, Fingerprint: r.Fingerprint, Recipe: r.Recipe, LeaseEnd: Time(r.LeaseEndMs)}, true
	}
	return store.ClaimResult{}, false
}

// Claim decides a Claim of p on the live record cur (nil when the
// identity has none, or only an expired one) at nowMs: it returns the
// answer and the record to store, or nil when nothing changes. A repeated
// claim (cur running under p.Token) restarts its lease in cur itself, the
// expiry never earlier; a fresh claim or a takeover is a new record.
// p has passed p.Validate.
func Claim(cur *Record, p store.ClaimParams, nowMs int64) (store.ClaimResult, *Record) {
	leaseEnd := nowMs + p.Lease.Milliseconds()
	retention := p.Retention.Milliseconds()
	takeover := false
	if cur != nil {
		if cur.Running && cur.Token == p.Token {
			// A retried claim whose first answer was lost: its lease
			// restarts now as a fresh claim's would, and the expiry
			// never moves earlier.
			cur.LeaseEndMs = leaseEnd
			cur.ExpiryMs = max(cur.ExpiryMs, RunningExpiry(nowMs, leaseEnd, retention))
			return store.ClaimResult{State: store.Claimed, Takeover: cur.Takeover, Fingerprint: cur.Fingerprint, Recipe: cur.Recipe, LeaseEnd: Time(leaseEnd)}, cur
		}
		if res, ok := Answer(cur, p, nowMs); ok {
			return res, nil
		}
		takeover = true
	}
	next := &Record{
		ID:          p.Identity,
		Running:     true,
		Takeover:    takeover,
		Fingerprint: p.Fingerprint,
		Recipe:      p.Recipe,
		Token:       p.Token,
		CreatedMs:   nowMs,
		LeaseEndMs:  leaseEnd,
		ExpiryMs:    RunningExpiry(nowMs, leaseEnd, retention),
		RetentionMs: retention,
	}
	return store.ClaimResult{State: store.Claimed, Takeover: takeover, Fingerprint: p.Fingerprint, Recipe: p.Recipe, LeaseEnd: Time(leaseEnd)}, next
}

// Holds reports whether Complete, Release and Extend with token act on the
// live record r (contract rule 3): it is running and holds token.
func Holds(r *Record, token string) bool { return r != nil && r.Running && r.Token == token }

// Complete turns the running record r into a completed one holding resp,
// whose StoredAt it sets to nowMs: no token, no lease, and an expiry of
// now + retention (never, for retention 0). The caller passes a resp of
// its own (a copy where it must not share the caller's).
func Complete(r *Record, resp *store.Response, nowMs int64) {
	resp.StoredAt = Time(nowMs)
	r.Running, r.Token, r.Takeover, r.LeaseEndMs = false, "", false, 0
	r.Resp, r.StoredAtMs = resp, nowMs
	r.ExpiryMs = 0
	if r.RetentionMs > 0 {
		r.ExpiryMs = nowMs + r.RetentionMs
	}
}

// Extend moves the lease end of the running record r to now + lease; its
// expiry follows (lease end + store.AbandonedKeep for retention 0, never
// earlier than the lease end otherwise).
func Extend(r *Record, lease time.Duration, nowMs int64) {
	r.LeaseEndMs = nowMs + lease.Milliseconds()
	if r.RetentionMs == 0 {
		r.ExpiryMs = r.LeaseEndMs + store.AbandonedKeep.Milliseconds()
	} else if r.LeaseEndMs > r.ExpiryMs {
		r.ExpiryMs = r.LeaseEndMs
	}
}

// Indexable reports whether Index records the live record r: it is
// completed (not running, not gone) with a response.
func Indexable(r *Record) bool { return r != nil && !r.Running && !r.Gone && r.Resp != nil }

// Tombstoned reports whether Tombstone turns the live record r, indexed
// when its completion was stored at storedAtMs: it is still that
// completion (store.Store, contract rule 9).
func Tombstoned(r *Record, storedAtMs int64) bool {
	return Indexable(r) && r.StoredAtMs == storedAtMs
}

// Tombstone returns the tombstone of r: its identity, created time,
// expiry and retention, nothing else.
func Tombstone(r *Record) *Record {
	return &Record{ID: r.ID, Gone: true, CreatedMs: r.CreatedMs, ExpiryMs: r.ExpiryMs, RetentionMs: r.RetentionMs}
}

// Get returns what Get reports of the live record r at nowMs; the
// Response is r.Resp itself.
func Get(r *Record, nowMs int64) *store.Record {
	out := &store.Record{
		Identity:     r.ID,
		Fingerprint:  r.Fingerprint,
		Recipe:       r.Recipe,
		CreatedAt:    Time(r.CreatedMs),
		LeaseEnd:     Time(r.LeaseEndMs),
		RetentionEnd: Time(r.ExpiryMs),
	}
	switch {
	case r.Gone:
		out.State = store.Gone
	case !r.Running:
		out.State, out.Response = store.Completed, r.Resp
	case Over(r.LeaseEndMs, nowMs):
		out.State, out.Token = store.Abandoned, r.Token
	default:
		out.State, out.Token = store.Running, r.Token
	}
	return out
}
