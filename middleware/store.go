package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/config/drivers"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/lazy"
)

// firstAttemptWait bounds how long New waits for the first attempt to open
// the store when it does not wait for the store (Options.WaitStore 0): a
// store that answers is connected when New returns, so a service does not
// refuse its first keyed requests for want of a few milliseconds; one that
// refuses connections fails the attempt at once; one that does not answer
// at all leaves New after this (Valkey's dial timeout), the attempt going
// on in the background.
const firstAttemptWait = 2 * time.Second

// storeHooks are told what the store does: its state after each check
// (idemgate_store_up), each write that waited for replica
// acknowledgements, and each disruption that may have lost notifications
// (drivers.Options). New points them at its metrics and engines; a
// SharedStore at every middleware built on it at the time.
type storeHooks struct {
	up         func(up bool)
	ack        func(op string, took time.Duration, acknowledged bool)
	disruption func()
}

// openStore returns the store cfg names, closed when ctx ends; for a
// server store the connector's Down (nil for the local stores, which have
// no outage), for proxy.Options.StoreDown; and a channel closed once the
// store is.
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
func openStore(ctx context.Context, cfg *config.Config, wait time.Duration, log *slog.Logger, h storeHooks) (store.Store, func() bool, <-chan struct{}, error) {
	c := cfg.Store
	if err := storeConfigErrors(cfg); err != nil {
		return nil, nil, nil, fmt.Errorf("config: %w", err)
	}
	open := func(ctx context.Context) (store.Store, error) {
		return drivers.Open(ctx, c, drivers.Options{Logger: log, OnAck: h.ack, OnDisruption: h.disruption})
	}
	closed := make(chan struct{})
	if c.Driver != config.DriverValkey && c.Driver != config.DriverPostgres {
		st, err := open(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		h.up(true)
		go func() {
			<-ctx.Done()
			_ = st.Close()
			close(closed)
		}()
		return st, nil, closed, nil
	}
	lz := lazy.New(c.Driver)
	conn := &lazy.Connector{Open: open, Lazy: lz, Driver: c.Driver, Log: log, OnUp: h.up}
	h.up(false)
	if wait > 0 {
		if err := conn.Connect(ctx, wait); err != nil {
			_ = lz.Close()
			return nil, nil, nil, fmt.Errorf("the %s store is unreachable after Options.WaitStore %v: %w", c.Driver, wait, err)
		}
	}
	go func() {
		conn.Run(ctx)
		// A connection made after this is closed by lz.Set.
		_ = lz.Close()
		close(closed)
	}()
	t := time.NewTimer(firstAttemptWait)
	defer t.Stop()
	if !lz.Connected() {
		select {
		case <-conn.FirstAttempt():
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return lz, conn.Down, closed, nil
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
