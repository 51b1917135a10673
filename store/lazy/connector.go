package lazy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Bounds of the connection loop and of the checks after it.
const (
	// ConnectAttemptTimeout bounds one attempt to open the store.
	ConnectAttemptTimeout = 10 * time.Second
	// connectBackoffMin and connectBackoffMax bound the pause between
	// attempts, doubled after each failure. The cap is short: a store that
	// comes up while the process waits for it is in service within about
	// a second, and one dial a second to an absent store costs nothing.
	connectBackoffMin = 100 * time.Millisecond
	connectBackoffMax = time.Second
	// CheckInterval is how often Run pings a connected store, for OnUp
	// and the lost/back log lines.
	CheckInterval = time.Second
	// DownCheckInterval is how often Run pings a store its latest check
	// found down: while Down reports true every keyed request is refused
	// without a store call, so the end of an outage must be seen soon. A
	// ping to a server that refuses connections fails in microseconds, and
	// one to a stalled server is bounded by checkTimeout and never
	// overlaps the next.
	DownCheckInterval = 200 * time.Millisecond
	// checkTimeout bounds one of those pings.
	checkTimeout = 2 * time.Second
)

// Connector opens a store in the background, whatever its driver (a
// Valkey or PostgreSQL server that is not reachable yet, a bolt file
// another process still holds locked), and puts it behind a lazy Store
// once it answers, so that the standalone proxy listens and the middleware
// (and the Caddy module) starts while the store cannot be opened yet
// (package engine wires it for all three): keyed requests fail closed with
// store.ErrUnavailable until then. After the connection it pings the store
// every CheckInterval. It logs "store connected" once, then "store
// connection lost" and "store connection back" once per outage.
//
// The store's state is one value: every check, the connector's own pings
// and any other caller's (the proxy's /readyz) alike, goes through Note,
// which calls OnUp at the moment the check's answer is known, so a gauge
// fed by OnUp never lags /readyz by a ping interval.
//
// Down reports that same state to the request path: while the latest
// check found the store unreachable, the engine refuses keyed requests at
// once (proxy.Options.StoreDown) instead of letting each one wait for the
// store timeout. A single failed operation of a request changes nothing
// here; only a check does, and Run checks every DownCheckInterval while
// the store is down, so the refusals end soon after it is back.
//
// Set the exported fields before the first call; the methods are safe for
// concurrent use.
type Connector struct {
	// Open makes one attempt to open the store; ctx bounds it
	// (ConnectAttemptTimeout).
	Open func(ctx context.Context) (store.Store, error)
	// Lazy is the Store the opened store goes behind.
	Lazy *Store
	// Driver names the store in log lines ("valkey", "postgres").
	Driver string
	// Log receives the lines above; required.
	Log *slog.Logger
	// OnUp, when set, is told the store's state after each check and the
	// connection (idemgate_store_up).
	OnUp func(up bool)

	mu         sync.Mutex
	connected  bool      // "store connected" logged
	up         bool      // the state of the latest check applied
	applied    time.Time // start of the latest check applied
	firstOnce  sync.Once
	firstEnded sync.Once
	first      chan struct{}
	// down mirrors connected && !up for Down, read on every keyed request
	// without the lock.
	down atomic.Bool
}

// Down reports whether the store was connected and the latest check
// applied (Run's ping, /readyz's, through Note) found it unreachable. It
// is false before the first connection: the lazy Store fails every
// operation at once then, naming the last connection error. Cheap enough
// for every request (one atomic load).
func (c *Connector) Down() bool { return c.down.Load() }

// FirstAttempt returns a channel closed once the first attempt to open
// the store has ended, whether it connected or failed.
func (c *Connector) FirstAttempt() <-chan struct{} {
	c.firstOnce.Do(func() { c.first = make(chan struct{}) })
	return c.first
}

func (c *Connector) firstAttemptEnded() {
	c.FirstAttempt()
	c.firstEnded.Do(func() { close(c.first) })
}

// Note applies the outcome of a store check that started at start: err nil
// (or store.ErrNotAcknowledged: the store answers, readiness names its
// missing replicas) is up. A check that started before the one applied
// last is older news and changes nothing, so a slow ping that began before
// an outage ended cannot report the store down after readiness said up.
func (c *Connector) Note(start time.Time, err error) {
	now := err == nil || errors.Is(err, store.ErrNotAcknowledged)
	c.mu.Lock()
	defer c.mu.Unlock()
	if start.Before(c.applied) {
		return
	}
	c.applied = start
	if c.connected {
		switch {
		case c.up && !now:
			c.Log.Warn("store connection lost", "store", c.Driver, "err", err)
		case !c.up && now:
			c.Log.Info("store connection back", "store", c.Driver)
		}
	}
	c.up = now
	c.down.Store(c.connected && !now)
	c.onUp(now)
}

func (c *Connector) onUp(up bool) {
	if c.OnUp != nil {
		c.OnUp(up)
	}
}

// markConnected records the first successful connection.
func (c *Connector) markConnected(start time.Time) {
	c.mu.Lock()
	c.connected, c.up = true, true
	c.down.Store(false)
	if start.After(c.applied) {
		c.applied = start
	}
	c.onUp(true)
	c.mu.Unlock()
	c.Log.Info("store connected", "store", c.Driver)
}

// Connect tries to open the store until it succeeds, ctx ends or, with
// limit > 0, limit has passed; it returns the last error then (wrapping
// ctx's). Each failure is kept as the lazy Store's error (SetError); the
// first is logged as a warning.
func (c *Connector) Connect(ctx context.Context, limit time.Duration) error {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	backoff := connectBackoffMin
	warned := false
	for {
		// The first attempt starts at once; the backoff is only between
		// failed ones.
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, ConnectAttemptTimeout)
		s, err := c.Open(actx)
		cancel()
		if err == nil {
			err = c.Lazy.Set(s) // fails when the Store was closed meanwhile, and closes s
			if err == nil {
				c.markConnected(start)
			}
			c.firstAttemptEnded()
			return err
		}
		c.Lazy.SetError(err)
		c.firstAttemptEnded()
		if !warned {
			c.Log.Warn("store not reachable yet: keyed requests get 503 store-unavailable until it is; retrying in the background",
				"store", c.Driver, "err", err)
			warned = true
		} else {
			c.Log.Debug("store still not reachable", "store", c.Driver, "err", err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, connectBackoffMax)
	}
}

// Run connects (unless Connect already did) and then pings the store every
// CheckInterval (DownCheckInterval while Down) until ctx ends. A store that answers but lacks the replicas
// its acknowledgements need (store.ErrNotAcknowledged) counts as up: it is
// connected, and readiness reports the replicas.
func (c *Connector) Run(ctx context.Context) {
	if !c.Lazy.Connected() {
		if err := c.Connect(ctx, 0); err != nil {
			return
		}
	}
	t := time.NewTimer(CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := c.Lazy.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.Note(start, err)
		next := CheckInterval
		if c.Down() {
			next = DownCheckInterval
		}
		t.Reset(next)
	}
}
