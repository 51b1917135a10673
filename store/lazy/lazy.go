// Package lazy is a store.Store that stands in for a store not connected yet, so idemgate can listen before its store answers.
package lazy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemgate/idemgate/store"
)

// Store forwards every operation to the store given to Set. Until then
// every operation fails with an error wrapping store.ErrUnavailable that
// names the store and the last connection error (see SetError), so callers
// fail closed exactly as when a connected store is unreachable; Watch
// answers a channel already closed (the waiter re-reads and fails) and
// CachedReplay store.CacheSkipped (store.Defer). Its methods are safe for
// concurrent use.
type Store struct {
	// Store is the store.Defer wrapper over get that runs every
	// operation; Close and CachedReplay are Store's own.
	store.Store
	name string

	inner   atomic.Pointer[storeBox]
	lastErr atomic.Pointer[errBox]

	mu     sync.Mutex
	closed bool
}

type storeBox struct{ s store.Store }

type errBox struct{ err error }

var (
	_ store.Store       = (*Store)(nil)
	_ store.ReplayCache = (*Store)(nil)
)

// New returns a Store with nothing behind it yet; name ("valkey", "bolt")
// appears in its errors.
func New(name string) *Store {
	l := &Store{name: name}
	l.Store = store.Defer(l.get)
	return l
}

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

// CachedReplay implements store.ReplayCache for the store behind l; before
// it is connected there is nothing cached (store.CacheSkipped), and the
// claim that follows fails closed.
func (l *Store) CachedReplay(ctx context.Context, id store.Identity) (*store.Record, store.CacheResult, error) {
	return store.CachedReplayOf(ctx, l.Store, id)
}
