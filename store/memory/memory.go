// Package memory is an in-process store.Store for tests and single-instance deployments; it is neither durable nor shared between processes.
package memory

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/rules"
	"github.com/idemgate/idemgate/store/internal/sweep"
	"github.com/idemgate/idemgate/store/watch"
)

// DefaultSweepInterval is how often the background sweep runs by default.
const DefaultSweepInterval = time.Minute

// sweepBatch bounds how many records one sweep looks at, so a sweep never
// holds the lock for long; the rest is left to lazy removal and later sweeps.
const sweepBatch = 10000

// Option configures New.
type Option func(*Store)

// WithClock makes the store read now from clock instead of time.Now. The
// store truncates every time it reads to milliseconds, like store/valkey.
func WithClock(clock func() time.Time) Option { return func(s *Store) { s.clock = clock } }

// WithSweepInterval sets how often expired records are swept in the
// background (default DefaultSweepInterval); d <= 0 turns the background
// sweep off (expired records are still removed lazily when touched).
func WithSweepInterval(d time.Duration) Option { return func(s *Store) { s.sweepEvery = d } }

// Store is a store.Store kept in this process's memory. Records are copied
// in and out, so callers never share a header map or body slice with it.
type Store struct {
	clock      func() time.Time
	sweepEvery time.Duration

	mu      sync.Mutex
	records map[store.Identity]*rules.Record
	// index is the resource index (Store.Index and Store.Tombstone): per resource, the
	// records indexed there and the completion each entry saw.
	index    map[store.Resource]map[store.Identity]indexEntry
	watchers watch.Set[store.Identity]

	sweeper *sweep.Loop
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Sweeper = (*Store)(nil)
)

// indexEntry is one record in a resource's index: the completion it saw
// (stored at, unix ms), so a later record of the same identity is never
// tombstoned by it, and the record's expiry, which the entry never
// outlives.
type indexEntry struct {
	storedAtMs int64
	expiryMs   int64
}

// New returns an empty store. Call Close to stop its background sweep.
func New(opts ...Option) *Store {
	s := &Store{
		clock:      time.Now,
		sweepEvery: DefaultSweepInterval,
		records:    make(map[store.Identity]*rules.Record),
		index:      make(map[store.Resource]map[store.Identity]indexEntry),
	}
	for _, o := range opts {
		o(s)
	}
	s.sweeper = sweep.Start(s.sweepEvery, s.Sweep, nil)
	return s
}

// nowMs reads the clock in unix milliseconds, the resolution of every
// store.
func (s *Store) nowMs() int64 { return s.clock().Truncate(time.Millisecond).UnixMilli() }

// live returns the record for id unless it is absent or past its expiry
// (which it removes). Caller holds s.mu.
func (s *Store) live(id store.Identity, nowMs int64) *rules.Record {
	r := s.records[id]
	if r == nil {
		return nil
	}
	if rules.Over(r.ExpiryMs, nowMs) {
		delete(s.records, id)
		return nil
	}
	return r
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return &store.OpError{Store: "memory", Op: op, Err: err}
	}
	return nil
}

// Claim implements store.Store. Errors wrap store.ErrUnavailable (only a
// done ctx), or store.ErrInvalid for parameters p.Validate rejects.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return store.ClaimResult{}, err
	}
	if err := ctxErr(ctx, "claim"); err != nil {
		return store.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.nowMs()
	res, next := rules.Claim(s.live(p.Identity, nowMs), p, nowMs)
	if next != nil {
		s.records[p.Identity] = next
	}
	// Callers never share a stored response's header or body with the
	// store.
	res.Response = copyResponse(res.Response)
	return res, nil
}

// holder returns the live running record for id while it holds token.
// Caller holds s.mu.
func (s *Store) holder(id store.Identity, token string, nowMs int64) *rules.Record {
	if r := s.live(id, nowMs); rules.Holds(r, token) {
		return r
	}
	return nil
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	if err := ctxErr(ctx, "complete"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.nowMs()
	r := s.holder(id, token, nowMs)
	if r == nil {
		return false, nil
	}
	rules.Complete(r, copyResponse(&resp), nowMs)
	s.wakeLocked(id)
	return true, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	if err := ctxErr(ctx, "release"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder(id, token, s.nowMs()) == nil {
		return false, nil
	}
	delete(s.records, id)
	s.wakeLocked(id)
	return true, nil
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	if err := store.ValidateLease(lease); err != nil {
		return false, err
	}
	if err := ctxErr(ctx, "extend"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.nowMs()
	r := s.holder(id, token, nowMs)
	if r == nil {
		return false, nil
	}
	rules.Extend(r, lease, nowMs)
	return true, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	if err := ctxErr(ctx, "get"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.nowMs()
	r := s.live(id, nowMs)
	if r == nil {
		return nil, nil
	}
	out := rules.Get(r, nowMs)
	out.Response = copyResponse(out.Response)
	return out, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	if err := ctxErr(ctx, "delete"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	existed := s.live(id, s.nowMs()) != nil
	delete(s.records, id)
	if existed {
		s.wakeLocked(id)
	}
	return existed, nil
}

// Watch implements store.Store; notifications are in-process only.
func (s *Store) Watch(id store.Identity) (<-chan struct{}, func()) { return s.watchers.Watch(id) }

// wakeLocked wakes every watcher of id. Caller holds s.mu, so a watcher
// that re-reads the record sees the change that woke it.
func (s *Store) wakeLocked(id store.Identity) { s.watchers.Wake(id) }

// Ping implements store.Store; it only fails on a done ctx.
func (s *Store) Ping(ctx context.Context) error { return ctxErr(ctx, "ping") }

// Close stops the background sweep. It is safe to call more than once.
func (s *Store) Close() error {
	s.sweeper.Stop()
	return nil
}

// Sweep implements store.Sweeper: it removes up to 10000 records past
// their expiry and returns how many it removed. The background sweep calls
// it. It fails only on a done ctx.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	if err := ctxErr(ctx, "sweep"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.nowMs()
	seen, removed := 0, 0
	for id, r := range s.records {
		if seen++; seen > sweepBatch {
			break
		}
		if rules.Over(r.ExpiryMs, nowMs) {
			delete(s.records, id)
			removed++
		}
	}
	seen = 0
	for res, entries := range s.index {
		for id, e := range entries {
			if seen++; seen > sweepBatch {
				return removed, nil
			}
			if rules.Over(e.expiryMs, nowMs) {
				delete(entries, id)
			}
		}
		if len(entries) == 0 {
			delete(s.index, res)
		}
	}
	return removed, nil
}

// Index implements store.Store. It fails only on a done ctx.
func (s *Store) Index(ctx context.Context, path string, id store.Identity) error {
	if err := ctxErr(ctx, "index"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.live(id, s.nowMs())
	if !rules.Indexable(r) {
		return nil
	}
	res := store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path}
	entries := s.index[res]
	if entries == nil {
		entries = make(map[store.Identity]indexEntry)
		s.index[res] = entries
	}
	entries[id] = indexEntry{storedAtMs: r.StoredAtMs, expiryMs: r.ExpiryMs}
	return nil
}

// Tombstone implements store.Store. It fails only on a done ctx.
func (s *Store) Tombstone(ctx context.Context, res store.Resource) (int, error) {
	if err := ctxErr(ctx, "tombstone"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMs := s.nowMs()
	n := 0
	for id, e := range s.index[res] {
		if r := s.live(id, nowMs); rules.Tombstoned(r, e.storedAtMs) {
			s.records[id] = rules.Tombstone(r)
			n++
		}
	}
	// Every entry is spent: its record is a tombstone now, or another
	// record than the one indexed, or absent.
	delete(s.index, res)
	return n, nil
}

// Len returns the number of records held, expired ones not yet swept
// included (for tests and metrics).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

func copyResponse(r *store.Response) *store.Response {
	if r == nil {
		return nil
	}
	out := *r
	out.Header, out.Trailer = copyHeader(r.Header), copyHeader(r.Trailer)
	if r.Body != nil {
		out.Body = append([]byte{}, r.Body...)
	}
	return &out
}

// copyHeader deep-copies h; nil stays nil.
func copyHeader(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}
