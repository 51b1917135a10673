package valkey

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
)

// Layout 4 (docs/protocol.md, "Layout 4 (Valkey)"): a record is one
// string, built by idemgate, whose times are kept relative to the key's
// own expiry (PEXPIRETIME), so that a claim of a key never seen is one
// plain SET ... NX GET that needs no server time in its value.
const (
	// Layout3 writes every record as a hash, with one script per
	// operation; every build reads it.
	Layout3 = 3
	// Layout4 writes records as strings: a fresh claim is one SET NX GET,
	// a completion a short script that checks the token. Builds from
	// before it cannot read it (docs/protocol.md, "Rolling upgrade to
	// layout 4").
	Layout4 = 4
	// Layout5 is Layout4 whose running record also carries its absolute
	// expiry and a mark its waiters set, so that a completion is one SET
	// ... XX GET inside a script and publishes only for a waited-on record
	// (docs/protocol.md, "Layout 5 (Valkey)"). Builds from before it
	// cannot read its running records ("Rolling upgrade to layout 5").
	Layout5 = 5
)

// v4Field and v4Expiry name a layout 4 record in the field maps Go reads
// records from (get.lua's reply, CachedReplay): the string itself, and
// the key's PEXPIRETIME (-1 for none). A hash of layout 1 to 3 never has
// fields of these names (its names are letters).
const (
	v4Field  = "4"
	v4Expiry = "e"
)

// The first two bytes of a layout 4 record: the layout, then the state.
const (
	v4Running   = "4r"
	v4Completed = "4c"
	// v5Running starts a running record of layout 5; its completed
	// record is layout 4's.
	v5Running = "5r"
)

// running4 is a running record of layout 4:
//
//	"4r" ns(token) ns(owner) ns(scope) ns(key) ns(fingerprint) ns(recipe)
//	" " retention_ms " " gap_ms " " age_ms " " takeover
//
// with the lease end at PEXPIRETIME - gap and the claim at PEXPIRETIME -
// age. The numbers come last so that a script rewrites them (repeated
// claim, Extend) without parsing the netstrings.
//
// A running record of layout 5 is the same after "5r" instead of "4r",
// followed by
//
//	" " expiry_ms " " mark ("0" or "1")
//
// expiry_ms its key's expiry E (unix ms), which every write of it sets
// with PXAT (0 when a fresh claim without a bound of the server's clock
// wrote it), and mark "1" once a waiter asked its completion to PUBLISH
// (mark.lua).
type running4 struct {
	token, owner, scope, key, fingerprint, recipe string
	retentionMs, gapMs, ageMs                     int64
	takeover                                      bool
	// expiryMs and marked are layout 5's (expiryMs 0: not known); zero
	// for layout 4.
	expiryMs int64
	marked   bool
}

// running4Head returns the part of a running record that no script
// rewrites: state ("4r" or "5r") and the netstrings. Its first part,
// state ns(token), is what Complete, Release and Extend compare with the
// stored record.
func running4Head(state, token string, id store.Identity, fingerprint, recipe string) []byte {
	// Room for the netstrings' lengths and the numbers appendRunning4Tail
	// (and appendRunning5Tail) add, so that neither grows the slice again.
	b := make([]byte, 0, 100+len(token)+len(id.Owner)+len(id.Scope)+len(id.Key)+len(fingerprint)+len(recipe))
	b = append(b, state...)
	for _, s := range []string{token, id.Owner, id.Scope, id.Key, fingerprint, recipe} {
		b = appendNetstring(b, s)
	}
	return b
}

// tokenPrefix returns the first bytes of a record of the given state
// ("4r" or "4c") held or completed by token.
func tokenPrefix(state, token string) string {
	return state + strconv.Itoa(len(token)) + ":" + token
}

// appendNetstringInt appends the netstring of n's decimal digits.
func appendNetstringInt(b []byte, n int64) []byte {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], n, 10)
	b = strconv.AppendInt(b, int64(len(digits)), 10)
	b = append(b, ':')
	return append(b, digits...)
}

// appendRunning4Tail appends the numbers of a running record.
func appendRunning4Tail(b []byte, retentionMs, gapMs, ageMs int64, takeover bool) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, retentionMs, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, gapMs, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, ageMs, 10)
	if takeover {
		return append(b, " 1"...)
	}
	return append(b, " 0"...)
}

// appendRunning5Tail appends what a running record of layout 5 adds after
// appendRunning4Tail's numbers: its expiry (0: not known) and an unset
// mark.
func appendRunning5Tail(b []byte, expiryMs int64) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, expiryMs, 10)
	return append(b, " 0"...)
}

// expiry4 is the lifetime a fresh claim gives its record, as claim.lua
// computes x - now: the later of the lease end and the retention, or the
// lease end plus store.AbandonedKeep when retention is 0.
func expiry4(lease, retention time.Duration) int64 {
	if retention > 0 {
		return max(lease.Milliseconds(), retention.Milliseconds())
	}
	return lease.Milliseconds() + store.AbandonedKeep.Milliseconds()
}

// netstringReader reads the netstrings of a layout 4 record.
type netstringReader struct{ b []byte }

func (r *netstringReader) next() (string, error) {
	i := bytes.IndexByte(r.b, ':')
	if i < 1 || i > 10 {
		return "", fmt.Errorf("%w: no length", errRecord4)
	}
	n, err := canonicalInt(r.b[:i])
	if err != nil {
		return "", fmt.Errorf("%w: %w", errRecord4, err)
	}
	r.b = r.b[i+1:]
	if int64(len(r.b)) < n {
		return "", fmt.Errorf("%w: field of %d bytes truncated", errRecord4, n)
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s, nil
}

// errRecord4 is wrapped by every error of a layout 4 record that does not
// parse: a store error, never a guess at what was meant.
var errRecord4 = fmt.Errorf("layout 4 record")

// decodeRunning4 parses a running record of layout 4 or 5.
func decodeRunning4(v string) (*running4, error) {
	if len(v) < 2 || (v[:2] != v4Running && v[:2] != v5Running) {
		return nil, fmt.Errorf("%w: not running", errRecord4)
	}
	five := v[:2] == v5Running
	r := netstringReader{b: []byte(v[2:])}
	var out running4
	for _, p := range []*string{&out.token, &out.owner, &out.scope, &out.key, &out.fingerprint, &out.recipe} {
		var err error
		if *p, err = r.next(); err != nil {
			return nil, err
		}
	}
	tail := bytes.Split(r.b, []byte{' '})
	if five && len(tail) == 7 && (string(tail[6]) == "0" || string(tail[6]) == "1") {
		n, err := canonicalInt(tail[5])
		if err != nil {
			return nil, fmt.Errorf("%w: bad expiry %q (%w)", errRecord4, tail[5], err)
		}
		out.expiryMs, out.marked = n, string(tail[6]) == "1"
		tail = tail[:5]
	} else if five {
		return nil, fmt.Errorf("%w: bad tail %q", errRecord4, r.b)
	}
	if len(tail) != 5 || len(tail[0]) != 0 || (string(tail[4]) != "0" && string(tail[4]) != "1") {
		return nil, fmt.Errorf("%w: bad tail %q", errRecord4, r.b)
	}
	for i, p := range []*int64{&out.retentionMs, &out.gapMs, &out.ageMs} {
		n, err := canonicalInt(tail[i+1])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errRecord4, err)
		}
		*p = n
	}
	out.takeover = string(tail[4]) == "1"
	return &out, nil
}

// completed4 is a completed record of layout 4:
//
//	"4c" ns(token) ns(retention_ms) <the layout 3 record>
//
// the layout 3 record (compactRecord) holding idemgate's estimates of the
// claim's and the completion's server times. With a retention, the
// completion is PEXPIRETIME - retention, and the claim that much earlier
// than the estimates say; without one (kept forever, no expiry) the
// estimates are the times.
type completed4 struct {
	token       string
	retentionMs int64
	rec         *compactRecord
}

// encodeCompleted4 returns the completed record Complete writes.
func encodeCompleted4(codec *layout.BodyCodec, token string, retentionMs int64, c *compactRecord, resp store.Response) []byte {
	head, tail := layout.EncodeResponseParts(codec, resp)
	b := make([]byte, 0, 96+len(token)+len(c.owner)+len(c.scope)+len(c.key)+len(c.fingerprint)+len(c.recipe)+len(head)+len(tail))
	b = append(b, v4Completed...)
	b = appendNetstring(b, token)
	b = appendNetstringInt(b, retentionMs)
	for _, s := range []string{c.owner, c.scope, c.key, c.fingerprint, c.recipe} {
		b = appendNetstring(b, s)
	}
	b = appendNetstringInt(b, c.createdMs)
	b = appendNetstringInt(b, c.storedAtMs)
	b = append(b, head...)
	return append(b, tail...)
}

// decodeCompleted4 parses a completed record of layout 4.
func decodeCompleted4(v string) (*completed4, error) {
	if len(v) < 2 || v[:2] != v4Completed {
		return nil, fmt.Errorf("%w: not completed", errRecord4)
	}
	r := netstringReader{b: []byte(v[2:])}
	tok, err := r.next()
	if err != nil {
		return nil, err
	}
	rt, err := r.next()
	if err != nil {
		return nil, err
	}
	n, err := canonicalInt([]byte(rt))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRecord4, err)
	}
	c, err := decodeCompact(r.b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRecord4, err)
	}
	return &completed4{token: tok, retentionMs: n, rec: c}, nil
}

// times returns the claim and completion times of c given its key's
// PEXPIRETIME e (-1 for none): see completed4.
func (c *completed4) times(e int64) (createdMs, storedAtMs int64) {
	if c.retentionMs > 0 && e > 0 {
		stored := e - c.retentionMs
		return c.rec.createdMs + stored - c.rec.storedAtMs, stored
	}
	return c.rec.createdMs, c.rec.storedAtMs
}

// parseRecord4 reads a layout 4 record v whose key has PEXPIRETIME e (-1
// for none); nowMs (server time) tells a running record from an
// abandoned one.
func parseRecord4(codec *layout.BodyCodec, nowMs int64, v string, e int64) (*store.Record, error) {
	var end time.Time
	if e > 0 {
		end = time.UnixMilli(e)
	}
	if len(v) >= 2 && v[:2] == v4Completed {
		c, err := decodeCompleted4(v)
		if err != nil {
			return nil, err
		}
		created, stored := c.times(e)
		c.rec.createdMs, c.rec.storedAtMs = created, stored
		resp, err := c.rec.response(codec)
		if err != nil {
			return nil, err
		}
		return &store.Record{
			Identity:     store.Identity{Owner: c.rec.owner, Scope: c.rec.scope, Key: c.rec.key},
			State:        store.Completed,
			Fingerprint:  c.rec.fingerprint,
			Recipe:       c.rec.recipe,
			Response:     resp,
			CreatedAt:    msOrZero(created),
			RetentionEnd: end,
		}, nil
	}
	r, err := decodeRunning4(v)
	if err != nil {
		return nil, err
	}
	if e <= 0 {
		return nil, fmt.Errorf("%w: running record without an expiry", errRecord4)
	}
	rec := &store.Record{
		Identity:     store.Identity{Owner: r.owner, Scope: r.scope, Key: r.key},
		State:        store.Running,
		Fingerprint:  r.fingerprint,
		Recipe:       r.recipe,
		Token:        r.token,
		CreatedAt:    time.UnixMilli(e - r.ageMs),
		LeaseEnd:     time.UnixMilli(e - r.gapMs),
		RetentionEnd: end,
	}
	if e-r.gapMs <= nowMs {
		rec.State = store.Abandoned
	}
	return rec, nil
}

// heldClaim is what Complete needs to build a completed record of layout
// 4 that the running record holds and Complete's arguments do not: kept
// from the Claim that answered Claimed, by token.
type heldClaim struct {
	fingerprint, recipe string
	retentionMs         int64
	// createdMs is the claim's server time; at is when this process
	// learnt it, so that the completion's server time is estimated as
	// createdMs plus the time elapsed since (monotonic).
	createdMs int64
	at        time.Time
	// sure is until when the claim's lease has surely not ended by the
	// server's clock (leaseSure): before it no other token can have taken
	// the record over, and a completion skips reading its expiry. Zero
	// once a completion of this token failed (it may have completed the
	// record, which a retry then must put back exactly).
	sure time.Time
}

// leaseSure returns until when a lease counted from start, read on this
// process's monotonic clock before the claim was sent, has surely not
// ended by the server's clock. Every claim ends the lease no earlier than
// lease after the server's time at start (claim4's expiry is from a bound
// read after start, or the server's own time when it runs the SET or
// claim.lua), and the server's clock runs at most maxDriftPPM faster than
// this process's; 2 ms cover the server's whole milliseconds.
func leaseSure(start time.Time, lease time.Duration) time.Time {
	return start.Add(lease - lease*maxDriftPPM/1_000_000 - 2*time.Millisecond)
}

// maxHeld bounds the claims remembered: a claim its holder never
// completes nor releases (an unknown outcome, a crash of the caller)
// stays in the map until a newer one pushes it out. A completion whose
// claim was forgotten reads the record first (one more round trip).
const maxHeld = 1 << 16

// heldClaims are the claims this store answered Claimed, by token.
type heldClaims struct {
	mu sync.Mutex
	m  map[string]heldClaim
}

func (h *heldClaims) put(token string, c heldClaim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]heldClaim)
	}
	if _, ok := h.m[token]; !ok && len(h.m) >= maxHeld {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[token] = c
}

func (h *heldClaims) get(token string) (heldClaim, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.m[token]
	return c, ok
}

// unsure notes that a completion of token's claim failed: it may have
// gone through, and the record may no longer be the running one.
func (h *heldClaims) unsure(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.m[token]; ok {
		c.sure = time.Time{}
		h.m[token] = c
	}
}

// drop forgets token's claim: its Complete or Release answered.
func (h *heldClaims) drop(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, token)
}
