package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/drivers"
	"github.com/idemgate/idemgate/store/lazy"
)

// Bounds of the store connection loop, the standalone proxy's
// (cmd/idemgate, storeConnector).
const (
	// connectAttemptTimeout bounds one attempt to open the store.
	connectAttemptTimeout = 10 * time.Second
	// connectBackoffMin and connectBackoffMax bound the pause between
	// attempts, doubled after each failure: a store that comes up while
	// the service waits for it is in service within about a second.
	connectBackoffMin = 100 * time.Millisecond
	connectBackoffMax = time.Second
	// firstAttemptWait bounds how long New waits for the first attempt
	// when it does not wait for the store (Options.WaitStore 0): a store
	// that answers is connected when New returns, so a service does not
	// refuse its first keyed requests for want of a few milliseconds; one
	// that refuses connections fails the attempt at once; one that does
	// not answer at all leaves New after this (Valkey's dial timeout),
	// the attempt going on in the background.
	firstAttemptWait = 2 * time.Second
)

// openStore returns the store cfg names, closed when ctx ends.
//
// A server store (valkey, postgres) is connected in the background, as the
// standalone proxy does, openStore returning once the first attempt ended
// (firstAttemptWait at most): until it answers, the store returned fails every
// operation with store.ErrUnavailable, so keyed requests are refused 503
// store-unavailable and nothing reaches the handler (fail closed), while
// requests the engine does not enforce never touch it. With wait > 0,
// openStore first waits up to wait for it and returns an error wrapping
// store.ErrUnavailable if it still cannot be reached.
//
// What no waiting can fix fails at once: the store section of
// Config.Validate (a driver this build lacks, no Valkey address, a DSN that
// does not parse), and the local stores (memory, bolt: a file that cannot
// be opened), which have no outage to wait out.
func openStore(ctx context.Context, cfg *config.Config, wait time.Duration, log *slog.Logger, m *metrics.Metrics) (store.Store, error) {
	c := cfg.Store
	if err := storeConfigErrors(cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	open := func(ctx context.Context) (store.Store, error) {
		return drivers.Open(ctx, c, drivers.Options{Logger: log, OnAck: m.StoreAck})
	}
	if c.Driver != config.DriverValkey && c.Driver != config.DriverPostgres {
		st, err := open(ctx)
		if err != nil {
			return nil, err
		}
		m.StoreUp(true)
		go func() {
			<-ctx.Done()
			_ = st.Close()
		}()
		return st, nil
	}
	lz := lazy.New(c.Driver)
	m.StoreUp(false)
	if wait > 0 {
		if err := connect(ctx, lz, open, wait, c.Driver, log, m, nil); err != nil {
			_ = lz.Close()
			return nil, fmt.Errorf("the %s store is unreachable after Options.WaitStore %v: %w", c.Driver, wait, err)
		}
	}
	first := make(chan struct{})
	if lz.Connected() {
		close(first)
	} else {
		go func() {
			_ = connect(ctx, lz, open, 0, c.Driver, log, m, func() { close(first) })
		}()
	}
	go func() {
		<-ctx.Done()
		// A connection made after this is closed by lz.Set.
		_ = lz.Close()
	}()
	t := time.NewTimer(firstAttemptWait)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
	case <-ctx.Done():
	}
	return lz, nil
}

// storeConfigErrors returns the problems Config.Validate finds in the
// store section (paths "store.…"), the rest of which a configuration in
// process does not need (upstream.url, listen). A configuration from
// config.Load or config.Parse passed them already; one built in Go has not.
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

// connect tries to open the store until it succeeds, ctx ends or, with
// limit > 0, limit has passed (it returns the last error then), and puts it
// behind lz. It logs the first failure as a warning, the connection once,
// and calls firstDone (when not nil) once the first attempt has ended.
func connect(ctx context.Context, lz *lazy.Store, open func(context.Context) (store.Store, error), limit time.Duration, driver string, log *slog.Logger, m *metrics.Metrics, firstDone func()) error {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	backoff := connectBackoffMin
	warned := false
	for {
		actx, cancel := context.WithTimeout(ctx, connectAttemptTimeout)
		s, err := open(actx)
		cancel()
		if err == nil {
			err = lz.Set(s) // fails when ctx ended: lz is closed, and closed s
			if err == nil {
				m.StoreUp(true)
				log.Info("store connected", "store", driver)
			}
			if firstDone != nil {
				firstDone()
			}
			return err
		}
		lz.SetError(err)
		if firstDone != nil {
			firstDone()
			firstDone = nil
		}
		if !warned {
			log.Warn("store not reachable yet: keyed requests get 503 store-unavailable until it is; retrying in the background",
				"store", driver, "err", err)
			warned = true
		} else {
			log.Debug("store still not reachable", "store", driver, "err", err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, connectBackoffMax)
	}
}
