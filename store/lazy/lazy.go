// Package lazy is a store.Store that stands in for a store not connected yet, so idemgate can listen before its store answers.
package lazy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Store forwards every operation to the store given to Set. Until then
// every operation fails with an error wrapping store.ErrUnavailable that
// names the store and the last connection error (see SetError), so callers
// fail closed exactly as when a connected store is unreachable. Its methods
// are safe for concurrent use.
type Store struct {
	name string

	inner   atomic.Pointer[storeBox]
	lastErr atomic.Pointer[errBox]

	mu     sync.Mutex
	closed bool
}

type storeBox struct{ s store.Store }

type errBox struct{ err error }

var _ store.Store = (*Store)(nil)

// New returns a Store with nothing behind it yet; name ("valkey", "bolt")
// appears in its errors.
func New(name string) *Store { return &Store{name: name} }

// Set puts s behind the Store; every later operation goes to s. It returns
// an error, and closes s, when the Store was closed meanwhile or already
// has a store.
func (l *Store) Set(s store.Store) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.inner.Load() != nil {
		_ = s.Close()
		return errors.New("lazy store: closed or already set")
	}
	l.inner.Store(&storeBox{s: s})
	return nil
}

// SetError records why the last connection attempt failed; the errors of
// operations made before Set quote it.
func (l *Store) SetError(err error) { l.lastErr.Store(&errBox{err: err}) }

// Connected reports whether Set has been called.
func (l *Store) Connected() bool { return l.inner.Load() != nil }

func (l *Store) get() (store.Store, error) {
	if b := l.inner.Load(); b != nil {
		return b.s, nil
	}
	if e := l.lastErr.Load(); e != nil && e.err != nil {
		return nil, fmt.Errorf("the %s store is not connected yet (last attempt: %v): %w", l.name, e.err, store.ErrUnavailable)
	}
	return nil, fmt.Errorf("the %s store is not connected yet: %w", l.name, store.ErrUnavailable)
}

// Claim implements store.Store.
func (l *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	s, err := l.get()
	if err != nil {
		return store.ClaimResult{}, err
	}
	return s.Claim(ctx, p)
}

// Complete implements store.Store.
func (l *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	s, err := l.get()
	if err != nil {
		return false, err
	}
	return s.Complete(ctx, id, token, resp)
}

// Release implements store.Store.
func (l *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	s, err := l.get()
	if err != nil {
		return false, err
	}
	return s.Release(ctx, id, token)
}

// Extend implements store.Store.
func (l *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	s, err := l.get()
	if err != nil {
		return false, err
	}
	return s.Extend(ctx, id, token, lease)
}

// Get implements store.Store.
func (l *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	s, err := l.get()
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// Delete implements store.Store.
func (l *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	s, err := l.get()
	if err != nil {
		return false, err
	}
	return s.Delete(ctx, id)
}

// Watch implements store.Store. Before Set it returns a channel that is
// already closed (a spurious wake-up the contract allows): the waiter
// re-reads the record, which fails while nothing is connected.
func (l *Store) Watch(id store.Identity) (<-chan struct{}, func()) {
	s, err := l.get()
	if err != nil {
		ch := make(chan struct{})
		close(ch)
		return ch, func() {}
	}
	return s.Watch(id)
}

// Ping implements store.Store: before Set it fails with the error that
// names the store and the last connection error.
func (l *Store) Ping(ctx context.Context) error {
	s, err := l.get()
	if err != nil {
		return err
	}
	return s.Ping(ctx)
}

// Close closes the store behind, if any; a later Set closes the store it
// is given instead of keeping it. Safe to call more than once.
func (l *Store) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if b := l.inner.Load(); b != nil {
		return b.s.Close()
	}
	return nil
}

// Index implements store.Store for the store behind l.
func (l *Store) Index(ctx context.Context, path string, id store.Identity) error {
	s, err := l.get()
	if err != nil {
		return err
	}
	return s.Index(ctx, path, id)
}

// Tombstone implements store.Store for the store behind l.
func (l *Store) Tombstone(ctx context.Context, res store.Resource) (int, error) {
	s, err := l.get()
	if err != nil {
		return 0, err
	}
	return s.Tombstone(ctx, res)
}

// CachedReplay implements store.ReplayCache for the store behind l; before
// it is connected there is nothing cached (store.CacheSkipped), and the
// claim that follows fails closed.
func (l *Store) CachedReplay(ctx context.Context, id store.Identity) (*store.Record, store.CacheResult, error) {
	s, err := l.get()
	if err != nil {
		return nil, store.CacheSkipped, nil
	}
	return store.CachedReplayOf(ctx, s, id)
}
