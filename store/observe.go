package store

import (
	"context"
	"time"
)

// Op names a store operation, for an Observer.
type Op uint8

// The operations an Observer sees: every method of Store but Watch and
// Close, and ReplayCache.CachedReplay.
const (
	OpClaim Op = iota + 1
	OpComplete
	OpRelease
	OpExtend
	OpGet
	OpDelete
	OpPing
	OpIndex
	OpTombstone
	OpCachedReplay
)

// String returns the operation's lowercase name ("claim", "complete", ...,
// "cached_replay"), the metric label and the span name's suffix.
func (o Op) String() string {
	switch o {
	case OpClaim:
		return "claim"
	case OpComplete:
		return "complete"
	case OpRelease:
		return "release"
	case OpExtend:
		return "extend"
	case OpGet:
		return "get"
	case OpDelete:
		return "delete"
	case OpPing:
		return "ping"
	case OpIndex:
		return "index"
	case OpTombstone:
		return "tombstone"
	case OpCachedReplay:
		return "cached_replay"
	}
	return "unknown"
}

// Call is one store operation as an Observer sees it.
type Call struct {
	Op Op
	// Identity is the record's; for OpTombstone the resource's Owner and
	// Scope (no Key), for OpPing the zero Identity.
	Identity Identity
}

// Outcome is how a Call ended.
type Outcome struct {
	// Took is the time from just after Observer.Start to the operation's
	// return.
	Took time.Duration
	// Err is the operation's error, as returned to the caller.
	Err error
	// State is the answer's state (OpClaim) or the record's (OpGet,
	// Absent when there is none).
	State State
	// Takeover is the answer's (OpClaim).
	Takeover bool
	// Acted is whether the operation acted (OpComplete, OpRelease,
	// OpExtend, OpDelete).
	Acted bool
	// Count is how many records were turned (OpTombstone).
	Count int
	// Cache is how the answer was found (OpCachedReplay).
	Cache CacheResult
}

// Observer is told of every operation of a store wrapped by Observe:
// metrics time them, tracing puts a span around them. Its methods must be
// safe for concurrent use, and cheap: they run on every store call of the
// hot path.
type Observer interface {
	// Start is called before the operation runs; the operation runs with
	// the context it returns (a span's), and End gets started back.
	Start(ctx context.Context, c Call) (_ context.Context, started any)
	// End is called once the operation returned, with what it returned.
	End(c Call, started any, o Outcome)
}

// Observe returns s with o told of every operation (see Observer). The
// store returned forwards every result and error unchanged, and is a
// ReplayCache that forwards to s's (CachedReplayOf); it is not a Sweeper.
func Observe(s Store, o Observer) Store { return &wrapper{fixed: s, obs: o} }

// Defer returns a Store whose every operation runs on the store next
// returns at the time of the call, for a store that is not connected yet
// (store/lazy). While next fails, every operation returns its error
// (callers fail closed, as for an unreachable store), except Watch, whose
// channel is closed at once (a spurious wake-up the contract allows: the
// waiter re-reads and fails), CachedReplay, which answers CacheSkipped
// (the claim that follows fails), and Close, which has nothing to close.
func Defer(next func() (Store, error)) Store { return &wrapper{next: next} }

// wrapper is the one store wrapper: Observe's and Defer's.
type wrapper struct {
	fixed Store
	next  func() (Store, error)
	obs   Observer
}

func (w *wrapper) target() (Store, error) {
	if w.fixed != nil {
		return w.fixed, nil
	}
	return w.next()
}

// start tells the observer, if any, that c starts.
func (w *wrapper) start(ctx context.Context, c Call) (context.Context, any, time.Time) {
	if w.obs == nil {
		return ctx, nil, time.Time{}
	}
	ctx, started := w.obs.Start(ctx, c)
	return ctx, started, time.Now()
}

// end tells the observer, if any, that c ended with o.
func (w *wrapper) end(c Call, started any, t0 time.Time, o Outcome) {
	if w.obs == nil {
		return
	}
	o.Took = time.Since(t0)
	w.obs.End(c, started, o)
}

func (w *wrapper) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	c := Call{Op: OpClaim, Identity: p.Identity}
	ctx, started, t0 := w.start(ctx, c)
	s, err := w.target()
	var res ClaimResult
	if err == nil {
		res, err = s.Claim(ctx, p)
	}
	w.end(c, started, t0, Outcome{Err: err, State: res.State, Takeover: res.Takeover})
	return res, err
}

// acted runs one of the operations that answer whether they acted.
func (w *wrapper) acted(ctx context.Context, c Call, op func(context.Context, Store) (bool, error)) (bool, error) {
	ctx, started, t0 := w.start(ctx, c)
	s, err := w.target()
	ok := false
	if err == nil {
		ok, err = op(ctx, s)
	}
	w.end(c, started, t0, Outcome{Err: err, Acted: ok})
	return ok, err
}

func (w *wrapper) Complete(ctx context.Context, id Identity, token string, resp Response) (bool, error) {
	return w.acted(ctx, Call{Op: OpComplete, Identity: id}, func(ctx context.Context, s Store) (bool, error) {
		return s.Complete(ctx, id, token, resp)
	})
}

func (w *wrapper) Release(ctx context.Context, id Identity, token string) (bool, error) {
	return w.acted(ctx, Call{Op: OpRelease, Identity: id}, func(ctx context.Context, s Store) (bool, error) {
		return s.Release(ctx, id, token)
	})
}

func (w *wrapper) Extend(ctx context.Context, id Identity, token string, lease time.Duration) (bool, error) {
	return w.acted(ctx, Call{Op: OpExtend, Identity: id}, func(ctx context.Context, s Store) (bool, error) {
		return s.Extend(ctx, id, token, lease)
	})
}

func (w *wrapper) Delete(ctx context.Context, id Identity) (bool, error) {
	return w.acted(ctx, Call{Op: OpDelete, Identity: id}, func(ctx context.Context, s Store) (bool, error) {
		return s.Delete(ctx, id)
	})
}

func (w *wrapper) Get(ctx context.Context, id Identity) (*Record, error) {
	c := Call{Op: OpGet, Identity: id}
	ctx, started, t0 := w.start(ctx, c)
	s, err := w.target()
	var rec *Record
	if err == nil {
		rec, err = s.Get(ctx, id)
	}
	state := Absent
	if rec != nil {
		state = rec.State
	}
	w.end(c, started, t0, Outcome{Err: err, State: state})
	return rec, err
}

func (w *wrapper) Ping(ctx context.Context) error {
	c := Call{Op: OpPing}
	ctx, started, t0 := w.start(ctx, c)
	s, err := w.target()
	if err == nil {
		err = s.Ping(ctx)
	}
	w.end(c, started, t0, Outcome{Err: err})
	return err
}

func (w *wrapper) Index(ctx context.Context, path string, id Identity) error {
	c := Call{Op: OpIndex, Identity: id}
	ctx, started, t0 := w.start(ctx, c)
	s, err := w.target()
	if err == nil {
		err = s.Index(ctx, path, id)
	}
	w.end(c, started, t0, Outcome{Err: err})
	return err
}

func (w *wrapper) Tombstone(ctx context.Context, res Resource) (int, error) {
	c := Call{Op: OpTombstone, Identity: Identity{Owner: res.Owner, Scope: res.Scope}}
	ctx, started, t0 := w.start(ctx, c)
	s, err := w.target()
	n := 0
	if err == nil {
		n, err = s.Tombstone(ctx, res)
	}
	w.end(c, started, t0, Outcome{Err: err, Count: n})
	return n, err
}

// CachedReplay implements ReplayCache for the store behind w (see
// CachedReplayOf); with nothing behind it yet it answers CacheSkipped.
func (w *wrapper) CachedReplay(ctx context.Context, id Identity) (*Record, CacheResult, error) {
	c := Call{Op: OpCachedReplay, Identity: id}
	ctx, started, t0 := w.start(ctx, c)
	var (
		rec *Record
		res = CacheSkipped
	)
	s, err := w.target()
	if err == nil {
		rec, res, err = CachedReplayOf(ctx, s, id)
	} else {
		err = nil
	}
	w.end(c, started, t0, Outcome{Err: err, Cache: res})
	return rec, res, err
}

func (w *wrapper) Watch(id Identity) (<-chan struct{}, func()) {
	s, err := w.target()
	if err != nil {
		ch := make(chan struct{})
		close(ch)
		return ch, func() {}
	}
	return s.Watch(id)
}

func (w *wrapper) Close() error {
	s, err := w.target()
	if err != nil {
		return nil
	}
	return s.Close()
}
