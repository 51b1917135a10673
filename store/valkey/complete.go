package valkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/valkey-io/valkey-go"
)

// Complete implements store.Store with complete.lua, or complete4.lua
// (complete5.lua) for a record of layout 4 (5): each answers 2 for a
// record of the other kind (hash or string), which the other script then
// completes. Errors wrap store.ErrUnavailable; a Status outside 100..599
// is rejected.
func (s *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	s.calls.enter()
	defer s.calls.leave()
	if resp.Status < 100 || resp.Status > 599 {
		return false, fmt.Errorf("valkey store: complete: status %d outside 100..599", resp.Status)
	}
	key := s.Key(id)
	// Called directly, not through method values, which would allocate
	// on every completion (TestHotPathAllocationCeilings).
	var n int64
	var err error
	if s.layout != Layout3 {
		if n, err = s.complete4(ctx, id, key, token, resp); err == nil && n == 2 {
			n, err = s.complete3(ctx, id, key, token, resp)
		}
	} else if n, err = s.complete3(ctx, id, key, token, resp); err == nil && n == 2 {
		n, err = s.complete4(ctx, id, key, token, resp)
	}
	if err != nil {
		// It may have gone through: a retry may then find the record
		// this token completed, which it must put back exactly
		// (complete4).
		s.held.unsure(token)
		return false, err
	}
	if n == 2 {
		// The record changed layout between the two scripts: not held.
		n = 0
	}
	s.held.drop(token)
	return n == 1, nil
}

// complete3 completes a hash (layouts 1 to 3) with complete.lua: 1
// completed, 0 not held, 2 a string (layout 4).
func (s *Store) complete3(ctx context.Context, _ store.Identity, key, token string, resp store.Response) (int64, error) {
	// Layout 3: the response travels as its head and its stored body (the
	// zstd frame, or resp.Body itself when the codec leaves it), which
	// complete.lua concatenates after the rest of the record. The strings
	// share those bytes (never written again), so a large body is not
	// copied on its way out.
	head, tail := encodeResponseParts(s.codec, resp)
	// ARGV[4], "1": a repeat by the completing token re-confirms the
	// record (store contract, rule 3), so a completion that was not
	// acknowledged can be retried and its WAIT then means something.
	args := []string{token, valkey.BinaryString(head), s.channel, s.repeat(), valkey.BinaryString(tail)}
	n, err := s.intOp(ctx, "complete", s.complete, s.completeSrc, key, args)
	if err == nil && n == 1 {
		// Its retries may come here: the first is read into the cache.
		s.sawCompleted(key)
	}
	return n, err
}

// complete4 completes a string (layout 4 or 5) with complete4.lua or
// complete5.lua, the completed record (layout 4's) built here: 1
// completed, 0 not held, 2 a hash. A claim this store made was written in
// its own layout; another is read first, and its first bytes tell.
func (s *Store) complete4(ctx context.Context, id store.Identity, key, token string, resp store.Response) (int64, error) {
	h, ok := s.held.get(token)
	runningPrefix := tokenPrefix(v4Running, token)
	five := ok && s.layout == Layout5
	// "1": the record may not be the token's any more (its lease may have
	// passed, or a completion failed), and complete5.lua reads its expiry
	// first so that a record it puts back keeps it exactly. Before the
	// lease surely ends the one SET ... XX GET does.
	exact := "1"
	if ok && time.Now().Before(h.sure) {
		exact = "0"
	}
	var storedMs int64
	if ok {
		storedMs = h.createdMs + time.Since(h.at).Milliseconds()
	} else {
		// Claimed through another Store, or forgotten (maxHeld): the
		// running record tells what the completed one keeps.
		nowMs, f, err := s.getFields(ctx, "complete", key)
		if err != nil {
			return 0, err
		}
		v, str := f[v4Field]
		if f == nil {
			return 0, nil
		}
		if !str {
			return 2, nil
		}
		if _, err := parseFields(s.codec, nowMs, f); err != nil {
			// Not a record this store wrote: a failure, never an answer.
			return 0, unavailable("complete", err)
		}
		five = strings.HasPrefix(v, v5Running)
		switch {
		case strings.HasPrefix(v, runningPrefix) || (five && strings.HasPrefix(v[2:], runningPrefix[2:])):
			r, err := decodeRunning4(v)
			e, eerr := strconv.ParseInt(f[v4Expiry], 10, 64)
			if err != nil || eerr != nil {
				return 0, unavailable("complete", fmt.Errorf("%w (%w)", err, eerr))
			}
			h = heldClaim{fingerprint: r.fingerprint, recipe: r.recipe, retentionMs: r.retentionMs, createdMs: e - r.ageMs}
			storedMs = nowMs
		case s.acks.On() && strings.HasPrefix(v, tokenPrefix(v4Completed, token)):
			// A repeat that re-confirms: the script writes no new record,
			// and a prefix no record starts with keeps it from doing so.
			runningPrefix = "\x00"
		default:
			return 0, nil
		}
	}
	c := compactRecord{owner: id.Owner, scope: id.Scope, key: id.Key, fingerprint: h.fingerprint, recipe: h.recipe,
		createdMs: h.createdMs, storedAtMs: max(storedMs, h.createdMs)}
	rec := encodeCompleted4(s.codec, token, h.retentionMs, &c, resp)
	var n int64
	var err error
	if five {
		args := []string{v5Running + runningPrefix[2:], valkey.BinaryString(rec), strconv.FormatInt(h.retentionMs, 10), s.channel,
			tokenPrefix(v4Completed, token), s.repeat(), runningPrefix, exact}
		n, err = s.intOp(ctx, "complete", s.completeV5, s.complete5Src, key, args)
	} else {
		args := []string{runningPrefix, valkey.BinaryString(rec), strconv.FormatInt(h.retentionMs, 10), s.channel,
			tokenPrefix(v4Completed, token), s.repeat()}
		n, err = s.intOp(ctx, "complete", s.completeV4, s.complete4Src, key, args)
	}
	if err == nil && n == 1 {
		s.sawCompleted4(key)
	}
	return n, err
}

// repeat is complete.lua's and complete4.lua's flag that lets the
// completing token re-confirm its record: on with acks only.
func (s *Store) repeat() string {
	if s.acks.On() {
		return "1"
	}
	return "0"
}
