package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/store"
)

const (
	// listenCheckEvery is how long the listening connection may stay silent
	// before it is pinged, so a dead link is noticed without traffic.
	listenCheckEvery = 5 * time.Second
	// listenPingTimeout bounds that ping.
	listenPingTimeout = 2 * time.Second
	// minRelistenDelay and maxRelistenDelay bound the backoff between
	// attempts to re-establish the listening connection.
	minRelistenDelay = 50 * time.Millisecond
	maxRelistenDelay = time.Second
)

// ListenApplicationName is the application_name of the listening
// connection (pooled connections keep the DSN's, "idemgate" by default), so
// operators can tell it apart in pg_stat_activity.
const ListenApplicationName = "idemgate-listen"

// Watch implements store.Store: the watcher is woken by the notification of
// Complete, Release and Delete from any process sharing the table, and
// spuriously whenever the listening connection is lost or re-established.
func (s *Store) Watch(id store.Identity) (<-chan struct{}, func()) {
	return s.watchers.Watch(idKey(ID(id)))
}

// listen keeps one connection LISTENing on the channel until ctx ends,
// reconnecting with backoff after errors; ready is closed after the first
// LISTEN succeeds. Every loss and every re-establishment wakes all watchers
// (notifications may have been missed meanwhile) and calls OnDisruption.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig, ready chan struct{}) {
	cfg.RuntimeParams["application_name"] = ListenApplicationName
	var readyOnce sync.Once
	established := false
	delay := minRelistenDelay
	for {
		conn, err := s.subscribe(ctx, cfg)
		if err == nil {
			if established {
				s.log.Info("postgres store: listening again", "channel", s.channel)
				s.disrupted()
			}
			established = true
			s.watchers.WakeAll()
			readyOnce.Do(func() { close(ready) })
			delay = minRelistenDelay
			err = s.receive(ctx, conn)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		if established {
			s.log.Warn("postgres store: listening connection lost; reconnecting", "channel", s.channel, "err", err)
			s.disrupted()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRelistenDelay)
	}
}

func (s *Store) disrupted() {
	if s.onDisruption != nil {
		s.onDisruption()
	}
	s.watchers.WakeAll()
}

// subscribe opens the listening connection and runs LISTEN on it.
func (s *Store) subscribe(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// receive wakes the watchers of every notified record id until the
// connection fails (returned) or ctx ends (nil). A connection silent for
// listenCheckEvery is pinged.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenCheckEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			s.watchers.Wake(n.Payload)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
			return err
		}
		if conn.IsClosed() {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
