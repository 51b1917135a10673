// Package watch keeps the in-process waiters of store records and wakes them when a record changes.
package watch

import "sync"

// Set holds the waiters of records named by keys of type K (an identity or
// a server-side record key). The zero Set is ready to use; it is safe for
// concurrent use. Every store implements store.Store's Watch with one.
type Set[K comparable] struct {
	mu      sync.Mutex
	waiters map[K]map[*waiter]struct{}
	closed  bool
}

type waiter struct{ ch chan struct{} }

// Watch returns a channel that Wake(key), WakeAll or Close closes, and a
// stop function that forgets the waiter (safe to call more than once, and
// after the channel closed). After Close the channel is closed at once, so
// a caller re-checks the store, gets its error and fails closed instead of
// waiting for a wake-up that cannot come.
func (s *Set[K]) Watch(key K) (<-chan struct{}, func()) {
	w := &waiter{ch: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(w.ch)
		return w.ch, func() {}
	}
	if s.waiters == nil {
		s.waiters = make(map[K]map[*waiter]struct{})
	}
	set := s.waiters[key]
	if set == nil {
		set = make(map[*waiter]struct{})
		s.waiters[key] = set
	}
	set[w] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if set := s.waiters[key]; set != nil {
				delete(set, w)
				if len(set) == 0 {
					delete(s.waiters, key)
				}
			}
		})
	}
}

// Wake closes and forgets every waiter of key.
func (s *Set[K]) Wake(key K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.waiters[key] {
		close(w.ch)
	}
	delete(s.waiters, key)
}

// WakeAll closes and forgets every waiter, for when notifications may have
// been missed (a lost subscription).
func (s *Set[K]) WakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeAllLocked()
}

func (s *Set[K]) wakeAllLocked() {
	for key, set := range s.waiters {
		for w := range set {
			close(w.ch)
		}
		delete(s.waiters, key)
	}
}

// Close wakes every waiter and makes later Watch calls return a closed
// channel.
func (s *Set[K]) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.wakeAllLocked()
}

// Len returns how many keys have waiters (for tests and leak checks).
func (s *Set[K]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}
