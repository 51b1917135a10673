package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/lazy"
)

// Bounds of the store connection loop.
const (
	// connectAttemptTimeout bounds one attempt to open the store.
	connectAttemptTimeout = 10 * time.Second
	// connectBackoffMin and connectBackoffMax bound the pause between
	// attempts, doubled after each failure. The cap is short: a store that
	// comes up while the process waits for it is in service within about
	// a second, and one dial a second to an absent store costs nothing.
	connectBackoffMin = 100 * time.Millisecond
	connectBackoffMax = time.Second
	// storeCheckInterval is how often a connected store is pinged for
	// idemgate_store_up and the lost/back log lines.
	storeCheckInterval = time.Second
	// storeCheckTimeout bounds one of those pings.
	storeCheckTimeout = 2 * time.Second
)

// storeConnector opens the store in the background and puts it behind
// lazy once it answers, so the process can listen (healthz 200, readyz 503
// naming the store, keyed requests 503 store-unavailable, passthrough
// proxied) while the store is not reachable yet. It logs once "store
// connected", then once "store connection lost" and once "store connection
// back" per outage, and keeps idemgate_store_up current.
//
// The store's state is one value for /readyz and idemgate_store_up: every
// check, the connector's own pings and /readyz's (admin.Options.StoreChecked)
// alike, goes through note, which sets the gauge at the moment the check's
// answer is known. So the gauge never lags /readyz by a ping interval.
type storeConnector struct {
	open   func(ctx context.Context) (store.Store, error)
	lazy   *lazy.Store
	driver string
	log    *slog.Logger
	m      *metrics.Metrics

	mu        sync.Mutex
	connected bool      // "store connected" logged
	up        bool      // the state of the latest check applied
	applied   time.Time // start of the latest check applied
}

// note applies the outcome of a store check that started at start: err nil
// (or store.ErrNotAcknowledged: the store answers, /readyz names its
// missing replicas) is up. A check that started before the one applied
// last is older news and changes nothing, so a slow ping that began before
// an outage ended cannot set the gauge back to 0 after /readyz said 200.
func (c *storeConnector) note(start time.Time, err error) {
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
			c.log.Warn("store connection lost", "store", c.driver, "err", err)
		case !c.up && now:
			c.log.Info("store connection back", "store", c.driver)
		}
	}
	c.up = now
	c.m.StoreUp(now)
}

// markConnected records the first successful connection.
func (c *storeConnector) markConnected(start time.Time) {
	c.mu.Lock()
	c.connected, c.up = true, true
	if start.After(c.applied) {
		c.applied = start
	}
	c.m.StoreUp(true)
	c.mu.Unlock()
	c.log.Info("store connected", "store", c.driver)
}

// connect tries to open the store until it succeeds, ctx ends or, with
// limit > 0, limit has passed; it returns the last error then.
func (c *storeConnector) connect(ctx context.Context, limit time.Duration) error {
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
		actx, cancel := context.WithTimeout(ctx, connectAttemptTimeout)
		s, err := c.open(actx)
		cancel()
		if err == nil {
			if err := c.lazy.Set(s); err != nil {
				return err
			}
			c.markConnected(start)
			return nil
		}
		c.lazy.SetError(err)
		if !warned {
			c.log.Warn("store not reachable yet: keyed requests get 503 store-unavailable until it is; retrying in the background",
				"store", c.driver, "err", err)
			warned = true
		} else {
			c.log.Debug("store still not reachable", "store", c.driver, "err", err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, connectBackoffMax)
	}
}

// run connects (unless connect already did) and then pings the store every
// storeCheckInterval until ctx ends. A store that answers but lacks the
// replicas its acknowledgements need (store.ErrNotAcknowledged) counts as
// up: it is connected, and /readyz reports the replicas.
func (c *storeConnector) run(ctx context.Context) {
	if !c.lazy.Connected() {
		if err := c.connect(ctx, 0); err != nil {
			return
		}
	}
	t := time.NewTicker(storeCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
		err := c.lazy.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.note(start, err)
	}
}
