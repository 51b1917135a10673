package middleware

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// SharedStore is a store that outlives the middlewares built on it
// (Options.Shared), for a host that replaces its configuration while it
// serves: Caddy's reload provisions a new middleware before it stops the
// previous one. On one SharedStore the new middleware finds the records
// the previous one wrote, and a call still running in the previous one
// holds its claim in the same store, extended by its heartbeat, so a
// duplicate that reaches the new middleware waits for it (woken by the
// same store's notifications) and is replayed its answer, or is refused
// 409, instead of running it a second time. A store of each middleware's
// own would lose the first (memory) or be locked by the second (bolt).
//
// What the store reports reaches every middleware built on it whose ctx
// has not ended: its state (idemgate_store_up, set at once on a middleware
// that joins), the replica acknowledgement waits, and the disruptions
// that make each engine hold lease takeovers back (the Valkey or
// PostgreSQL subscription lost). Safe for concurrent use.
type SharedStore struct {
	hooks  *sharedHooks
	st     store.Store
	down   func() bool // the connector's Down; nil for the local stores
	cancel context.CancelFunc
	closed <-chan struct{}
}

// SharedOptions configure OpenShared.
type SharedOptions struct {
	// Logger receives the store's warnings and connection lines; nil
	// discards them.
	Logger *slog.Logger
	// WaitStore is Options.WaitStore: how long OpenShared waits for a
	// Valkey or PostgreSQL store to answer before it returns an error; 0
	// returns after the first attempt and connects in the background
	// (keyed requests are refused 503 store-unavailable meanwhile).
	WaitStore time.Duration
}

// OpenShared opens the store cfg names (cfg.Store; the rest of cfg is not
// used) as New would, for the middlewares built with Options.Shared. It is
// not closed when their ctx ends: Close closes it. Its errors are New's
// about the store: an invalid store section, a bolt file that cannot be
// opened, WaitStore passed without the store answering.
func OpenShared(cfg *config.Config, opts SharedOptions) (*SharedStore, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &sharedHooks{users: make(map[*sharedUser]struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	st, down, closed, err := openStore(ctx, cfg, opts.WaitStore, log, storeHooks{up: h.setUp, ack: h.ack, disruption: h.disruption})
	if err != nil {
		cancel()
		return nil, err
	}
	return &SharedStore{hooks: h, st: st, down: down, cancel: cancel, closed: closed}, nil
}

// Close closes the store once, and returns when it is closed (a bolt file
// is unlocked), so a store opened next on the same file can lock it.
// Middlewares still built on it fail every keyed request from then on.
func (s *SharedStore) Close() error {
	s.cancel()
	<-s.closed
	return nil
}

// sharedHooks fans what the store reports out to the middlewares using it.
type sharedHooks struct {
	mu    sync.RWMutex // written by join, its end and setUp; read per write and disruption
	up    bool
	users map[*sharedUser]struct{}
}

// sharedUser is one middleware built on a SharedStore.
type sharedUser struct {
	m       *metrics.Metrics
	engines *engineSet
}

// join adds a middleware's metrics and engines until ctx ends, telling its
// metrics the store's state at once: the state changes only when a check
// finds it changed, and this middleware's gauge has seen none of them.
func (h *sharedHooks) join(ctx context.Context, m *metrics.Metrics, engines *engineSet) {
	u := &sharedUser{m: m, engines: engines}
	h.mu.Lock()
	h.users[u] = struct{}{}
	m.StoreUp(h.up)
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.users, u)
		h.mu.Unlock()
	})
}

func (h *sharedHooks) setUp(up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up = up
	for u := range h.users {
		u.m.StoreUp(up)
	}
}

func (h *sharedHooks) ack(op string, took time.Duration, acknowledged bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for u := range h.users {
		u.m.StoreAck(op, took, acknowledged)
	}
}

// disruption must not block (drivers.Options.OnDisruption), and
// NoteStoreFailure does not.
func (h *sharedHooks) disruption() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for u := range h.users {
		u.engines.noteStoreFailure()
	}
}
