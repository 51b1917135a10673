package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/config/drivers"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/lazy"
)

// Store is the store a configuration names, behind a lazy store that a
// connector opens in the background (lazy.Connector), whatever the driver:
// until it is open every operation fails with store.ErrUnavailable, so
// keyed requests are refused (fail closed) and nothing reaches the
// upstream or handler. What the store reports (its state after each
// check, idemgate_store_up; each wait for replica acknowledgements; each
// disruption that may have lost notifications, after which an engine
// holds lease takeovers back, proxy.Proxy.NoteStoreFailure) reaches every
// Engine built on it until that engine is closed.
//
// New opens one for its engine and closes it with the engine. One opened
// with OpenStore outlives the engines built on it (Options.Shared): a host
// that replaces its configuration while it serves (Caddy's reload, a
// service's new middleware) builds the new engine on it before it closes
// the old one, and the new engine finds the old one's records and the
// claims of the calls it still runs, which a store per engine would not
// share (memory) or could not open twice (bolt). Safe for concurrent use.
type Store struct {
	st     store.Store
	conn   *lazy.Connector
	cancel context.CancelFunc
	closed chan struct{}

	mu    sync.RWMutex // written by join, leave and setUp; read per write and disruption
	up    bool
	users map[*Engine]struct{}

	// owners are the owner sources of the policies AdmitOwners admitted.
	owners policy.OwnerLedger
}

// AdmitOwners remembers p as a policy whose records this store keeps,
// unless a route of it takes owners of one kind from another source than
// a policy admitted before did in the same scope (policy.OwnerLedger):
// that policy's records are still in the store under owner values the
// new source gives other principals (header:X-User 42 and header:X-Partner
// 42 are both "h:42"). A host that replaces its configuration on the store
// (a service's new middleware) asks it before it serves with p, as the
// proxy's reload and Caddy's ask theirs.
func (s *Store) AdmitOwners(p *policy.Policy) error {
	if err := s.owners.Admit(p); err != nil {
		return fmt.Errorf("owner source changed within a scope of records this store keeps: %w", err)
	}
	return nil
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Logger receives the driver's warnings and the connector's lines;
	// nil discards them.
	Logger *slog.Logger
	// WaitStore > 0 makes OpenStore wait that long for the store to open
	// and fail, wrapping store.ErrUnavailable, when it has not; 0 returns
	// at once (after FirstAttemptWait) and connects in the background.
	WaitStore time.Duration
	// WaitName is how the caller names WaitStore to its user, in the
	// error when the wait ran out ("--wait-store", "Options.WaitStore").
	WaitName string
	// FirstAttemptWait bounds how long OpenStore waits for the first
	// attempt to open the store when it does not wait for the store: a
	// store that answers is then open when OpenStore returns, so a
	// service does not refuse its first keyed requests for want of a few
	// milliseconds, while one that does not answer at all (a dropped
	// connection) delays the start by this much at most. 0 waits for
	// nothing (the standalone proxy listens at once).
	FirstAttemptWait time.Duration
}

// OpenStore opens the store cfg.Store names (the rest of cfg is not read),
// for engines built on it with Options.Shared; Close closes it. It fails,
// opening nothing, when the store section is invalid (the store.…
// problems of config.Config.Validate: a driver this build lacks, no Valkey
// address, a DSN that does not parse), and when WaitStore passed without
// the store opening (wrapping store.ErrUnavailable). ctx bounds that wait
// only.
func OpenStore(ctx context.Context, cfg *config.Config, o StoreOptions) (*Store, error) {
	if err := storeConfigErrors(cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := cfg.Store
	s := &Store{closed: make(chan struct{}), users: make(map[*Engine]struct{})}
	lz := lazy.New(c.Driver)
	s.st = lz
	s.conn = &lazy.Connector{
		Open: func(ctx context.Context) (store.Store, error) {
			return drivers.Open(ctx, c, drivers.Options{Logger: log, OnAck: s.ack, OnDisruption: s.disruption})
		},
		Lazy: lz, Driver: c.Driver, Log: log, OnUp: s.setUp,
	}
	if o.WaitStore > 0 {
		if err := s.conn.Connect(ctx, o.WaitStore); err != nil {
			_ = lz.Close()
			return nil, fmt.Errorf("the %s store is unreachable after %s %v: %w", c.Driver, o.WaitName, o.WaitStore, err)
		}
	}
	life, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		s.conn.Run(life)
		// A store opened after this is closed by lz.Set.
		_ = lz.Close()
		close(s.closed)
	}()
	if o.FirstAttemptWait > 0 && !lz.Connected() {
		t := time.NewTimer(o.FirstAttemptWait)
		defer t.Stop()
		select {
		case <-s.conn.FirstAttempt():
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return s, nil
}

// Close stops the connector and closes the store, and returns when it is
// closed (a bolt file is unlocked), so a store opened next on the same
// file can lock it. Engines still built on it fail every keyed request
// from then on.
func (s *Store) Close() error {
	s.cancel()
	<-s.closed
	return nil
}

// Down reports whether the connector's latest check found the store
// unreachable (lazy.Connector.Down), for proxy.Options.StoreDown.
func (s *Store) Down() bool { return s.conn.Down() }

// Note applies the outcome of a store check made elsewhere (the admin
// listener's /readyz), so the store's state is one value
// (lazy.Connector.Note).
func (s *Store) Note(start time.Time, err error) { s.conn.Note(start, err) }

// join makes e hear what the store reports until leave, telling its
// metrics the store's state at once: the state changes only when a check
// finds it changed, and e's gauge has seen none of them.
func (s *Store) join(e *Engine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[e] = struct{}{}
	e.m.StoreUp(s.up)
}

func (s *Store) leave(e *Engine) {
	s.mu.Lock()
	delete(s.users, e)
	s.mu.Unlock()
}

func (s *Store) setUp(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = up
	for e := range s.users {
		e.m.StoreUp(up)
	}
}

func (s *Store) ack(op string, took time.Duration, acknowledged bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for e := range s.users {
		e.m.StoreAck(op, took, acknowledged)
	}
}

// disruption must not block (drivers.Options.OnDisruption), and
// noteStoreFailure does not.
func (s *Store) disruption() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for e := range s.users {
		e.noteStoreFailure()
	}
}

// storeConfigErrors returns the problems Config.Validate finds in the
// store section (paths "store.…"), the rest of which an engine in process
// does not need (upstream.url, listen). A configuration from config.Load
// or config.Parse passed them already; one built in Go has not.
func storeConfigErrors(cfg *config.Config) error {
	err := cfg.Validate()
	if err == nil {
		return nil
	}
	all := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	}
	var mine []error
	for _, e := range all {
		var fe *policy.FieldError
		if errors.As(e, &fe) && strings.HasPrefix(fe.Path, "store.") {
			mine = append(mine, e)
		}
	}
	return errors.Join(mine...)
}
