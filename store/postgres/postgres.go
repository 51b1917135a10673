// Package postgres is the store.Store shared by idemgate instances, kept in one PostgreSQL table with one atomic statement per operation and LISTEN/NOTIFY wake-ups.
package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/sweep"
	"github.com/idemgate/idemgate/store/watch"
)

// DefaultTable is Options.Table when unset.
const DefaultTable = "idemgate_records"

// DefaultConnectTimeout bounds one connection attempt when the DSN sets no
// connect_timeout.
const DefaultConnectTimeout = 2 * time.Second

// DefaultSweepInterval is Options.SweepInterval when unset.
const DefaultSweepInterval = time.Minute

// DefaultSweepBatch is Options.SweepBatch when unset: rows one sweep
// statement deletes at most.
const DefaultSweepBatch = 1000

// Options configures New.
type Options struct {
	// DSN is a libpq connection string, URL (postgres://user:pass@host:5432/db)
	// or key=value form, as pgx's ParseConfig reads it; the pool_* keys of
	// pgxpool are honoured too. Required.
	DSN string
	// Table is the records table, "name" or "schema.name", each part
	// lowercase letters, digits and underscores (ValidateTable); default
	// DefaultTable. It is always quoted in statements.
	Table string
	// MaxConns caps the connection pool (not counting the one listening
	// connection); 0 keeps pgxpool's default (pool_max_conns in the DSN, or
	// the larger of 4 and the number of CPUs).
	MaxConns int32
	// SweepInterval is how often expired rows are deleted in the
	// background; 0 means DefaultSweepInterval, < 0 turns the sweep off
	// (expired rows stay absent to every operation either way).
	SweepInterval time.Duration
	// SweepBatch bounds the rows one sweep statement deletes; 0 means
	// DefaultSweepBatch.
	SweepBatch int
	// NoCreate makes New fail when the table is missing instead of
	// creating it (for roles without DDL rights, which never need it once
	// `idemgate migrate` has run).
	NoCreate bool
	// Logger receives listen connection losses and sweep failures; nil
	// discards them.
	Logger *slog.Logger
	// OnDisruption, when set, is called from the listening goroutine (it
	// must not block) each time the LISTEN connection is lost and each time
	// it is re-established: the database may have been unreachable, even
	// for a process that sent no statement meanwhile. The proxy uses it to
	// hold lease takeovers back after an outage
	// (proxy.Proxy.NoteStoreFailure), exactly as with the Valkey store.
	OnDisruption func()
	// Clock, for tests only, replaces the database clock: its reading,
	// truncated to milliseconds, is sent as a parameter of each statement
	// instead of clock_timestamp(). Leave it nil in production so that
	// every time comes from the database server (store contract rule 4).
	Clock func() time.Time
}

// Store is a store.Store on PostgreSQL: a pgxpool.Pool for the statements,
// one dedicated LISTEN connection dispatching notifications to in-process
// watchers by record id, and a background sweep of expired rows.
//
// Layout (docs/protocol.md, "Store records (Postgres)"; every statement a
// file of sql/, the schema the numbered files of migration/):
// one row per identity, keyed by the SHA-256 of the identity encoding of
// the Valkey store, every time a timestamptz truncated to milliseconds from
// the database clock, and Complete/Release/Delete call pg_notify(channel,
// lowercase hex id) in the same statement.
type Store struct {
	pool         *pgxpool.Pool
	name         string // Options.Table as given
	table        string // quoted, schema-qualified when given so
	channel      string
	log          *slog.Logger
	onDisruption func()
	clock        func() time.Time
	sweepEvery   time.Duration
	sweepBatch   int

	sql statements
	// codec compresses the body of every response column Complete writes
	// (layout 3) and decompresses it on every read.
	codec *layout.BodyCodec

	watchers watch.Set[string] // by lowercase hex record id

	stop context.CancelFunc
	// sweeper is the background sweep; nil until New starts it.
	sweeper   *sweep.Loop
	done      sync.WaitGroup
	closeOnce sync.Once
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Sweeper = (*Store)(nil)
)

// New connects to PostgreSQL, checks the tables' columns, applying the
// pending migrations first (as Migrate does) when a table is missing or
// lacks one (unless Options.NoCreate), starts listening for notifications
// and returns the store once the LISTEN is confirmed. Errors reaching the
// server wrap store.ErrUnavailable; a bad DSN or table name, a table of
// another layout, or one to migrate whose recorded schema version is newer
// than this build's (ErrSchemaNewer) returns an error that does not.
func New(ctx context.Context, opts Options) (*Store, error) {
	cfg, err := PoolConfig(opts)
	if err != nil {
		return nil, err
	}
	return newWithConfig(ctx, opts, cfg)
}

// PoolConfig parses opts.DSN into the pgxpool configuration New uses: MaxConns
// applied, a DefaultConnectTimeout when the DSN sets none, and
// default_transaction_isolation forced to read committed (every statement
// relies on its rules for ON CONFLICT). Errors name the bad option.
func PoolConfig(opts Options) (*pgxpool.Config, error) {
	if opts.DSN == "" {
		return nil, errors.New("postgres store: Options.DSN is empty")
	}
	if opts.MaxConns < 0 {
		return nil, fmt.Errorf("postgres store: Options.MaxConns %d is negative", opts.MaxConns)
	}
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		// pgx quotes the DSN in some errors; never log a password.
		return nil, errors.New("postgres store: cannot parse the DSN (a libpq URL or key=value string)")
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "idemgate"
	}
	return cfg, nil
}

func newWithConfig(ctx context.Context, opts Options, cfg *pgxpool.Config) (*Store, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	table, err := QuoteTable(opts.Table)
	if err != nil {
		return nil, err
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.SweepBatch <= 0 {
		opts.SweepBatch = DefaultSweepBatch
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	codec, err := layout.NewBodyCodec()
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable("connect", err)
	}
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, unavailable("connect", err)
	}
	s := &Store{
		pool:         pool,
		name:         opts.Table,
		table:        table,
		channel:      Channel(opts.Table),
		log:          log,
		onDisruption: opts.OnDisruption,
		clock:        opts.Clock,
		sweepEvery:   opts.SweepInterval,
		sweepBatch:   opts.SweepBatch,
		sql:          buildStatements(opts.Table),
		codec:        codec,
	}
	// The listening connection is dialled while the schema is checked on a
	// pooled one: a lazy start is ready after the slower of the two, not
	// after both in turn.
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	ready := make(chan struct{})
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		s.listen(bg, cfg.ConnConfig.Copy(), ready)
	}()
	if err := s.prepareSchema(ctx, opts.Table, !opts.NoCreate); err != nil {
		_ = s.Close()
		return nil, err
	}
	select {
	case <-ready:
	case <-ctx.Done():
		_ = s.Close()
		return nil, unavailable("listen", ctx.Err())
	}
	s.sweeper = sweep.Start(s.sweepEvery, s.Sweep, func(n int, err error) {
		s.log.Warn("postgres store: sweeping expired rows failed", "deleted", n, "err", err)
	})
	return s, nil
}

// ID returns the primary key of id's row: the SHA-256 of the identity
// encoding every store shares (layout.IdentityBytes), 32 raw bytes.
func ID(id store.Identity) []byte {
	sum := sha256.Sum256(layout.IdentityBytes(id))
	return sum[:]
}

// idKey is the watcher key of a row id, as carried by notifications.
func idKey(rowID []byte) string { return hex.EncodeToString(rowID) }

// Table returns the quoted table name the store uses, e.g.
// "public"."idemgate_records" or "idemgate_records".
func (s *Store) Table() string { return s.table }

// TableName returns Options.Table as given (DefaultTable when it was empty).
func (s *Store) TableName() string { return s.name }

// Channel returns the notification channel of the store (see the package
// func Channel).
func (s *Store) Channel() string { return s.channel }

func unavailable(op string, err error) error {
	return &store.OpError{Store: "postgres", Op: op, Err: err}
}

// now returns the injected clock's reading truncated to milliseconds, or
// nil so the statement reads the database clock.
func (s *Store) now() *time.Time {
	if s.clock == nil {
		return nil
	}
	t := s.clock().Truncate(time.Millisecond)
	return &t
}

// Ping implements store.Store with a round trip on a pooled connection.
// Errors wrap store.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return unavailable("ping", err)
	}
	if err := s.pool.Ping(ctx); err != nil {
		return unavailable("ping", withCtx(ctx, err))
	}
	return nil
}

// Close stops the listener and the sweep, wakes every watcher and closes the
// pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.sweeper != nil {
			s.sweeper.Stop()
		}
		if s.stop != nil {
			s.stop()
		}
		s.done.Wait()
		s.pool.Close()
		s.watchers.Close()
	})
	return nil
}

// withCtx makes err also wrap ctx's error once ctx is done, so callers can
// test errors.Is(err, context.DeadlineExceeded) whatever pgx returned.
func withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}
