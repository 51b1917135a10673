// The operations of the store.Store contract on one record, each one
// bbolt transaction deciding by the rule book of the local stores
// (store/internal/rules).

package bolt

import (
	"context"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/rules"
)

// Claim implements store.Store. Answers that change nothing (Completed,
// Running, Abandoned) come from a read transaction, so replays do not queue
// behind writes; the rest is decided again inside one write transaction.
// Errors wrap store.ErrUnavailable, or store.ErrInvalid for parameters
// p.Validate rejects.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return store.ClaimResult{}, err
	}
	var (
		res  store.ClaimResult
		done bool
	)
	err := s.view(ctx, "claim", func(tx *bbolt.Tx, nowMs int64) error {
		records, _, err := buckets(tx)
		if err != nil {
			return err
		}
		r, err := load(records, RecordKey(p.Identity), p.Identity, nowMs, s.codec)
		if err != nil || r == nil {
			return err
		}
		res, done = rules.Answer(r, p, nowMs)
		return nil
	})
	if err != nil || done {
		return res, err
	}
	err = s.update(ctx, "claim", func(tx *bbolt.Tx, nowMs int64) error {
		w, r, err := begin(tx, p.Identity, nowMs, s.codec)
		if err != nil {
			return err
		}
		var next *record
		if res, next = rules.Claim(r, p, nowMs); next != nil {
			return w.put(next)
		}
		return nil
	})
	if err != nil {
		return store.ClaimResult{}, err
	}
	return res, nil
}

// holding is an update on id that acts only while the live record is
// running and holds token; act changes the record (w, r) and reports
// whether watchers must be woken.
func (s *Store) holding(ctx context.Context, op string, id store.Identity, token string, act func(w *writer, r *record, nowMs int64) (wake bool, err error)) (bool, error) {
	var did, wake bool
	err := s.update(ctx, op, func(tx *bbolt.Tx, nowMs int64) error {
		w, r, err := begin(tx, id, nowMs, s.codec)
		if err != nil {
			return err
		}
		if !rules.Holds(r, token) {
			return nil
		}
		wake, err = act(w, r, nowMs)
		did = err == nil
		return err
	})
	if err != nil {
		return false, err
	}
	if wake {
		s.wake(id)
	}
	return did, nil
}

// Complete implements store.Store. Errors wrap store.ErrUnavailable.
func (s *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	return s.holding(ctx, "complete", id, token, func(w *writer, r *record, nowMs int64) (bool, error) {
		stored := resp
		rules.Complete(r, &stored, nowMs)
		return true, w.put(r)
	})
}

// Release implements store.Store. Errors wrap store.ErrUnavailable.
func (s *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	return s.holding(ctx, "release", id, token, func(w *writer, _ *record, _ int64) (bool, error) {
		return true, w.remove()
	})
}

// Extend implements store.Store. Errors wrap store.ErrUnavailable, or
// store.ErrInvalid for a lease store.ValidateLease rejects.
func (s *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	if err := store.ValidateLease(lease); err != nil {
		return false, err
	}
	return s.holding(ctx, "extend", id, token, func(w *writer, r *record, nowMs int64) (bool, error) {
		rules.Extend(r, lease, nowMs)
		return false, w.put(r)
	})
}

// Get implements store.Store with a read transaction. Errors wrap
// store.ErrUnavailable.
func (s *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	var out *store.Record
	err := s.view(ctx, "get", func(tx *bbolt.Tx, nowMs int64) error {
		records, _, err := buckets(tx)
		if err != nil {
			return err
		}
		r, err := load(records, RecordKey(id), id, nowMs, s.codec)
		if err != nil || r == nil {
			return err
		}
		out = rules.Get(r, nowMs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete implements store.Store. Errors wrap store.ErrUnavailable.
func (s *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	var existed bool
	err := s.update(ctx, "delete", func(tx *bbolt.Tx, nowMs int64) error {
		w, r, err := begin(tx, id, nowMs, s.codec)
		if err != nil || r == nil {
			return err
		}
		existed = true
		return w.remove()
	})
	if err != nil {
		return false, err
	}
	if existed {
		s.wake(id)
	}
	return existed, nil
}
