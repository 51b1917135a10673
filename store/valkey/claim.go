package valkey

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/valkey-io/valkey-go"
)

// Claim implements store.Store with claim.lua. Errors wrap
// store.ErrUnavailable, or store.ErrInvalid for parameters p.Validate
// rejects.
//
// A full server (maxmemory, noeviction) refuses claim.lua with -OOM before
// it runs, since it may write; Claim then reads the record with get.lua
// (no-writes), and answers what claim.lua answers before its first write
// (Completed, Gone, another token's Running, an Abandoned record not taken
// over; see claimRefused). Anything else stays the -OOM error: no claim is
// made while the server is full.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	s.calls.enter()
	defer s.calls.leave()
	if err := p.Validate(); err != nil {
		return store.ClaimResult{}, err
	}
	// Read before anything is sent: the lease counts from no earlier
	// (leaseSure).
	start := time.Now()
	if s.layout != Layout3 {
		state := v4Running
		if s.layout == Layout5 {
			state = v5Running
		}
		head := running4Head(state, p.Token, p.Identity, p.Fingerprint, p.Recipe)
		if !s.acks.On() {
			return s.claim4(ctx, p, head, start)
		}
		return s.claimScript(ctx, p, claimArgs(p, head), start)
	}
	return s.claimScript(ctx, p, claimArgs(p, nil), start)
}

// claimArgs are claim.lua's arguments for p; head, when not nil, is the
// running record of layout 4 or 5 it writes (ARGV[10]).
func claimArgs(p store.ClaimParams, head []byte) []string {
	noTakeover := "0"
	if p.NoTakeover {
		noTakeover = "1"
	}
	args := make([]string, 9, 10)
	args[0], args[1], args[2], args[3], args[4] = p.Identity.Owner, p.Identity.Scope, p.Identity.Key, p.Fingerprint, p.Token
	args[5], args[6], args[7], args[8] = ms(p.Lease), ms(p.Retention), noTakeover, p.Recipe
	if head != nil {
		args = append(args, valkey.BinaryString(head))
	}
	return args
}

// claimScript runs claim.lua with args (see Claim), with its
// acknowledgement when acks are on; start is when Claim began.
func (s *Store) claimScript(ctx context.Context, p store.ClaimParams, args []string, start time.Time) (store.ClaimResult, error) {
	if s.acks.On() {
		key := s.Key(p.Identity)
		// With the fence (fenceCmd): a Completed answer hands out a completion the
		// script only read, which may still wait for its own
		// acknowledgement; replayed before that and lost in a failover, it
		// would be taken over and run again after a client got its result.
		w, err := s.writeAcked(ctx, "claim", s.claimSrc, key, args, true)
		if err != nil {
			return s.claimRefused(ctx, p, err)
		}
		out, str, err := parseClaim(s.codec, p.Identity, w.res)
		if err != nil {
			return store.ClaimResult{}, unavailable("claim", err)
		}
		// A claim wrote the record, a replay hands one out: both count
		// only once acknowledged. The other answers hand nothing out.
		if out.State == store.Claimed || out.State == store.Completed {
			if err := s.acked("claim", w); err != nil {
				return store.ClaimResult{}, completedNotAcked(out.State, err)
			}
		}
		s.claimed(key, p, out, str, start)
		return out, nil
	}
	res, key, err := s.exec(ctx, "claim", s.claim, p.Identity, args...)
	if err != nil {
		return s.claimRefused(ctx, p, err)
	}
	out, str, err := parseClaim(s.codec, p.Identity, res)
	if err != nil {
		return store.ClaimResult{}, unavailable("claim", err)
	}
	s.claimed(key, p, out, str, start)
	return out, nil
}

// claimed notes what claim.lua answered: a completed record for the
// replay cache, a claim of layout 4 for its Complete (start: when Claim
// began).
func (s *Store) claimed(key string, p store.ClaimParams, out store.ClaimResult, str bool, start time.Time) {
	switch {
	case out.State == store.Completed && str:
		s.sawCompleted4(key)
	case out.State == store.Completed:
		s.sawCompleted(key)
	case out.State == store.Claimed && s.layout != Layout3:
		// claim.lua wrote the record at lease end - lease (a repeated
		// claim keeps its first time: this is an estimate).
		s.hold(p, out.LeaseEnd.UnixMilli()-p.Lease.Milliseconds(), start)
	}
}

// hold notes a claim this store made of layout 4 or 5, for its Complete:
// what the completed record keeps (createdMs, the record's time of claim
// in unix ms by the server's clock) and until when its lease surely holds
// (leaseSure, from start, when Claim began).
func (s *Store) hold(p store.ClaimParams, createdMs int64, start time.Time) {
	s.held.put(p.Token, heldClaim{fingerprint: p.Fingerprint, recipe: p.Recipe,
		retentionMs: p.Retention.Milliseconds(), createdMs: createdMs, at: time.Now(), sure: leaseSure(start, p.Lease)})
}

// claim4 is Claim writing layout 4 or 5 without acknowledgements: one
// SET NX GET of the running record (layout 5's carries the expiry it
// sets, or 0 when the claim has no bound of the server's clock). A key never seen is claimed there; a
// completed record of layout 4 is answered from GET's reply and its key's
// PEXPIRETIME (another identity's fails closed, as parseClaim says);
// anything else (a running record, a hash of layouts 1 to 3
// or a tombstone, WRONGTYPE to SET ... GET, a reply lost on the way) goes
// to claim.lua, which decides by the server's clock and is safe to run
// after a SET that went through (a repeated claim). Errors as Claim's.
//
// The record's times are relative to its key's expiry E, which the claim
// must know. With a bound of the server's clock (serverClock) the SET
// sets E itself (PXAT bound + px): its lease ends no earlier than lease
// after the server's time when the bound was read (the lease counts from
// before the claim was sent, as a holder counts it: leaseSure), and at
// most the bound's error (its sample's round trip, 2 ms and the drift)
// later. The server may run the SET later than that: a claim answered
// within boundedCall (a tenth of the lease) of reading the bound holds a
// lease short by at most that (and the drift) from the moment the server
// ran it. A slower claim (a server busy or pausing its writes, this
// process stopped before the SET left) may have set a lease much shorter,
// or already over: it repeats itself with claim.lua, which restarts the
// lease by the server's TIME or answers the record another instance took
// over meanwhile (TestLayout4HeldClaimKeepsAWholeLease). Without a bound
// it sets PX px and asks PEXPIRETIME in the same round trip, and that
// answer bounds the clock for the claims after it.
func (s *Store) claim4(ctx context.Context, p store.ClaimParams, head []byte, start time.Time) (store.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return store.ClaimResult{}, unavailable("claim", err)
	}
	key := s.Key(p.Identity)
	px := expiry4(p.Lease, p.Retention)
	gap := px - p.Lease.Milliseconds()
	// Appended in head's spare room: head's own bytes, which claim.lua
	// may still be sent (claimArgs), are not written again.
	val := appendRunning4Tail(head, p.Retention.Milliseconds(), gap, px, false)
	var (
		old      string
		err      error
		e        int64
		eerr     error
		upper    int64
		gen      uint64
		bound    bool
		sent     reading
		sentGen  uint64
		setBound bool
	)
	var asked reading // when the bound was read
	if s.clock != nil {
		upper, asked, gen, bound = s.clock.upperMs()
	}
	if bound {
		e = upper + px
		if s.layout == Layout5 {
			val = appendRunning5Tail(val, e)
		}
		res, ok := awaitCall(ctx, func() valkey.ValkeyResult {
			return s.client.Do(ctx, s.client.B().Set().Key(key).Value(valkey.BinaryString(val)).Nx().Get().
				PxatMillisecondsTimestamp(e).Build())
		})
		if !ok {
			return store.ClaimResult{}, unavailable("claim", ctx.Err())
		}
		old, err = res.ToString()
		if valkey.IsValkeyNil(err) && (!s.clock.same(gen) || !s.clock.within(asked, boundedCall(p.Lease))) {
			// A connection was dialled during the call: the SET may have
			// reached another server (a failover) than the one the bound
			// is of. Or the call took longer than boundedCall: the
			// server may have run the SET so much later than the bound
			// that the lease it set is short, or already over and taken
			// over by another instance. claim.lua repeats the claim by
			// that server's clock, or answers who holds the record now.
			return s.claimScript(ctx, p, claimArgs(p, head), start)
		}
		if err == nil && strings.HasPrefix(old, v4Completed) {
			// The completed record's times hang on its key's expiry.
			e, eerr = awaitPexpiretime(ctx, s.client, key)
		}
	} else {
		if s.layout == Layout5 {
			// Its expiry is unknown before the SET: 0 says so (a
			// completion that must put the record back then gives it an
			// expiry never earlier than its own; docs/protocol.md,
			// "Layout 5 (Valkey)").
			val = appendRunning5Tail(val, 0)
		}
		if s.clock != nil {
			sent, sentGen = s.clock.begin()
			setBound = true
		}
		rs, ok := awaitCall(ctx, func() []valkey.ValkeyResult {
			return s.client.DoMulti(ctx,
				s.client.B().Set().Key(key).Value(valkey.BinaryString(val)).Nx().Get().PxMilliseconds(px).Build(),
				s.client.B().Pexpiretime().Key(key).Build())
		})
		if !ok {
			return store.ClaimResult{}, unavailable("claim", ctx.Err())
		}
		old, err = rs[0].ToString()
		e, eerr = rs[1].AsInt64()
		if setBound && valkey.IsValkeyNil(err) && eerr == nil && e > 0 {
			// Our SET set E = (the server's time when it ran) + px.
			s.clock.observe(e-px, sent, sentGen)
		}
	}
	switch {
	case valkey.IsValkeyNil(err) && eerr == nil && e > 0:
		// Claimed: the record is ours, its times those of the key's expiry.
		s.hold(p, e-px, start)
		return store.ClaimResult{State: store.Claimed, Fingerprint: p.Fingerprint, Recipe: p.Recipe, LeaseEnd: time.UnixMilli(e - gap)}, nil
	case err == nil && eerr == nil && e != -2 && strings.HasPrefix(old, v4Completed):
		r, perr := parseRecord4(s.codec, 0, old, e)
		if perr == nil && r.Identity != p.Identity {
			perr = errOtherIdentity
		}
		if perr != nil {
			return store.ClaimResult{}, unavailable("claim", perr)
		}
		s.sawCompleted4(key)
		return store.ClaimResult{State: store.Completed, Fingerprint: r.Fingerprint, Recipe: r.Recipe, Response: r.Response}, nil
	case refusedForMemory(err):
		return s.claimRefused(ctx, p, unavailable("claim", err))
	}
	if cerr := ctx.Err(); cerr != nil {
		return store.ClaimResult{}, unavailable("claim", ctxWrap(ctx, cerr))
	}
	return s.claimScript(ctx, p, claimArgs(p, head), start)
}

// awaitPexpiretime reads key's PEXPIRETIME: -1 without an expiry, -2 when
// the key is gone.
func awaitPexpiretime(ctx context.Context, c valkey.Client, key string) (int64, error) {
	return await(ctx, func() valkey.ValkeyResult {
		return c.Do(ctx, c.B().Pexpiretime().Key(key).Build())
	}).AsInt64()
}

// claimRefused answers the Claim p whose script the server refused with
// refused. When the refusal is -OOM (a full server under noeviction
// refuses every script that may write, claim.lua included, while it still
// runs get.lua, which declares no-writes), it reads the record, and every
// record for which claim.lua answers before its first write answers as
// claim.lua would have: a completed record Completed with its
// fingerprint, recipe and response; a tombstone Gone; a record running
// under another token Running with its fingerprint, recipe and lease end;
// and one whose lease has ended, held by another token, Abandoned when
// p.NoTakeover is set or its fingerprint is not p's. Get tells running
// from abandoned by the server's clock, as claim.lua does. The read is
// the claim's answer at the moment it ran, and the caller acts on it as on
// any such answer: a different request with the key is still refused as
// reused, and a duplicate of a call still running waits or gets 409
// instead of 503 — on a fail_open route it was forwarded unprotected, and
// the operation ran twice (TestFaultValkeyFullFailOpenKeepsARunningCallOnce).
// Replays thus go on while a full Valkey refuses new claims
// (docs/durability.md, "What a full Valkey still serves";
// TestFullValkeyReplaysCompleted). An absent record, a repeated claim of
// the holder's own token, a takeover, a record of another identity under
// the same key (a SHA-256 collision, or a key written by hand), a read
// that fails, and any refusal other than -OOM answer refused itself:
// claiming them would need a write, so Claim fails closed. A stored
// response that fails its integrity check answers that error
// (store.ErrStoredResponseDamaged), as claim.lua's answer would have.
func (s *Store) claimRefused(ctx context.Context, p store.ClaimParams, refused error) (store.ClaimResult, error) {
	if !refusedForMemory(refused) || ctx.Err() != nil {
		return store.ClaimResult{}, refused
	}
	id := p.Identity
	r, err := s.Get(ctx, id)
	switch {
	case err != nil:
		if errors.Is(err, store.ErrStoredResponseDamaged) {
			return store.ClaimResult{}, err
		}
		if errors.Is(err, store.ErrNotAcknowledged) {
			// Get answers it for a completed record only.
			return store.ClaimResult{}, completedNotAcked(store.Completed, err)
		}
		return store.ClaimResult{}, refused
	case r == nil || r.Identity != id:
		return store.ClaimResult{}, refused
	case r.State == store.Completed:
		return store.ClaimResult{State: store.Completed, Fingerprint: r.Fingerprint, Recipe: r.Recipe, Response: r.Response}, nil
	case r.State == store.Gone:
		return store.ClaimResult{State: store.Gone}, nil
	case r.Token == p.Token:
		// claim.lua repeats the holder's own claim: a write.
	case r.State == store.Running:
		return store.ClaimResult{State: store.Running, Fingerprint: r.Fingerprint, Recipe: r.Recipe, LeaseEnd: r.LeaseEnd}, nil
	case r.State == store.Abandoned && (p.NoTakeover || r.Fingerprint != p.Fingerprint):
		return store.ClaimResult{State: store.Abandoned, Fingerprint: r.Fingerprint, Recipe: r.Recipe, LeaseEnd: r.LeaseEnd}, nil
	}
	return store.ClaimResult{}, refused
}

// completedNotAcked is the error of a claim whose answer, state, was not
// acknowledged (err): for a completed record it also wraps
// store.ErrCompletedNotAcknowledged, so that the caller refuses the
// request rather than run the operation again (a fail_open route), which
// a failed claim of a fresh key would let it do.
func completedNotAcked(state store.State, err error) error {
	if state != store.Completed {
		return err
	}
	return fmt.Errorf("%w (%w)", err, store.ErrCompletedNotAcknowledged)
}

// refusedForMemory reports whether err carries the server's -OOM refusal
// ("OOM command not allowed when used memory > 'maxmemory'."), which a
// full server sends before a script that may write runs a single command.
func refusedForMemory(err error) bool {
	var verr *valkey.ValkeyError
	return errors.As(err, &verr) && strings.HasPrefix(verr.Error(), "OOM ")
}
