// Package bolt is a durable store.Store for a single idemgate instance, kept in one bbolt file that only one process may open at a time.
//
// File layout (also in docs/protocol.md, "Store records (bolt)"): bucket
// "meta" holds "version" = FormatVersion; bucket "records" maps
// RecordKey(identity) (SHA-256 of IdentityBytes, 32 bytes) to a record value;
// bucket "expiry" maps expiry_ms (8 bytes big-endian) + record key to an
// empty value, one entry per record that expires, so the sweep finds expired
// records in expiry order without reading the others. Bucket "index" maps
// IndexKey(resource) + record key to the stored_at_ms and expiry_ms of the
// completion indexed there (Store.Index and Store.Tombstone), and "index-expiry" maps
// expiry_ms + index key to an empty value for the sweep.
//
// A record value this build writes is format version 3 (record_v3.go;
// docs/protocol.md, "Record value (version 3)"): version, state and flags
// bytes, expiry_ms as 8 bytes big-endian at offset 3, varint times and
// status, uvarint-length fields (owner, scope, key, fingerprint, token,
// recipe, header, trailers), then the body to the end, compressed by
// layout.BodyCodec when that pays. Versions 1 and 2 (record_v2.go: fixed 8-byte
// times, 4-byte lengths) are still read; a file is marked 3 when opened.
package bolt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/sweep"
	"github.com/idemgate/idemgate/store/watch"
)

// DefaultSweepInterval is how often the background sweep runs by default.
const DefaultSweepInterval = time.Minute

// DefaultOpenTimeout is how long New waits for the file lock by default.
const DefaultOpenTimeout = time.Second

// ErrLocked is wrapped by New's error when another process (or another
// Store in this process) holds the file open.
var ErrLocked = errors.New("bolt file is locked by another process")

// Option configures New.
type Option func(*Store)

// WithClock makes the store read now from clock instead of time.Now. The
// store truncates every time it reads to milliseconds, like store/valkey.
func WithClock(clock func() time.Time) Option { return func(s *Store) { s.clock = clock } }

// WithSweepInterval sets how often expired records are swept in the
// background (default DefaultSweepInterval); d <= 0 turns the background
// sweep off (expired records are still treated as absent, and removed when
// a write touches them).
func WithSweepInterval(d time.Duration) Option { return func(s *Store) { s.sweepEvery = d } }

// WithOpenTimeout sets how long New waits for the file lock held by another
// process before failing with ErrLocked (default DefaultOpenTimeout); d <= 0
// means the default, never waiting forever.
func WithOpenTimeout(d time.Duration) Option { return func(s *Store) { s.openTimeout = d } }

// WithLogger sets the logger for background sweep failures (default: discard).
func WithLogger(log *slog.Logger) Option { return func(s *Store) { s.log = log } }

// Store is a store.Store in one bbolt file. Every operation is one bbolt
// transaction, so it is atomic and survives a crash once it returned.
// Watch notifications are in-process only: the file cannot be shared.
type Store struct {
	db          *bbolt.DB
	clock       func() time.Time
	sweepEvery  time.Duration
	openTimeout time.Duration
	log         *slog.Logger
	// codec compresses stored bodies (format version 3) and decompresses
	// them on every read.
	codec *layout.BodyCodec

	// watchers are woken by Close too, and later ones start woken, so a
	// waiter re-Claims, gets the store's error and fails closed.
	watchers watch.Set[store.Identity]

	sweeper   *sweep.Loop
	closeOnce sync.Once
	closeErr  error
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Sweeper = (*Store)(nil)
)

// New opens or creates the bbolt file at path (mode 0600; its directory
// must exist) and starts the background sweep. It fails with an error
// wrapping ErrLocked and store.ErrUnavailable when another process holds
// the file for longer than the open timeout, and with an error wrapping
// store.ErrUnavailable when the directory is missing, the file is not a
// bbolt file, or it was written in another FormatVersion. Call Close to
// stop the sweep and release the file.
func New(path string, opts ...Option) (*Store, error) {
	s := &Store{
		clock:       time.Now,
		sweepEvery:  DefaultSweepInterval,
		openTimeout: DefaultOpenTimeout,
	}
	for _, o := range opts {
		o(s)
	}
	if s.openTimeout <= 0 {
		s.openTimeout = DefaultOpenTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, fmt.Errorf("bolt store: %w: empty path", store.ErrUnavailable)
	}
	codec, err := layout.NewBodyCodec()
	if err != nil {
		return nil, fmt.Errorf("bolt store: %w", err)
	}
	s.codec = codec
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("bolt store: directory %q of %q must exist: %w: %w", dir, path, store.ErrUnavailable, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("bolt store: %q of %q is not a directory: %w", dir, path, store.ErrUnavailable)
	}
	// The hashmap freelist stays fast as deletes (release, retention,
	// sweep) fragment the file; the array one degrades.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: s.openTimeout, FreelistType: bbolt.FreelistMapType})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("bolt store: %q is open in another process (lock not acquired within %v; the bolt driver is single-instance): %w: %w: %w",
			path, s.openTimeout, ErrLocked, store.ErrUnavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bolt store: opening %q: %w: %w", path, store.ErrUnavailable, err)
	}
	if err := db.Update(initBuckets); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("bolt store: %q: %w: %w", path, store.ErrUnavailable, err)
	}
	s.db = db
	s.sweeper = sweep.Start(s.sweepEvery, s.Sweep, func(_ int, err error) {
		s.log.Warn("bolt store: sweeping expired records failed", "err", err)
	})
	return s, nil
}

// initBuckets creates the buckets of a new file and checks the format
// version of an existing one.
func initBuckets(tx *bbolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	switch v := meta.Get(keyVersion); {
	case v == nil:
		if err := meta.Put(keyVersion, []byte{FormatVersion}); err != nil {
			return err
		}
	case len(v) == 1 && (v[0] == formatV1 || v[0] == formatV2):
		// Version 1 and 2 records stay readable (decodeRecord); the file is
		// marked 3 so that an older build, which cannot read version 3
		// records, refuses the whole file instead of failing record by
		// record or, worse, replaying a compressed body as it is.
		if err := meta.Put(keyVersion, []byte{FormatVersion}); err != nil {
			return err
		}
	case len(v) != 1 || v[0] != FormatVersion:
		return fmt.Errorf("file format version %v, this build reads %d to %d", v, formatV1, FormatVersion)
	}
	for _, name := range [][]byte{bucketRecords, bucketExpiry, bucketIndex, bucketIndexExpiry} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

// Path returns the path of the bbolt file.
func (s *Store) Path() string { return s.db.Path() }

func (s *Store) nowMs() int64 { return s.clock().Truncate(time.Millisecond).UnixMilli() }

func unavailable(op string, err error) error {
	return &store.OpError{Store: "bolt", Op: op, Err: err}
}

// Watch implements store.Store; notifications are in-process only, which
// is all there is since no other process can open the file.
func (s *Store) Watch(id store.Identity) (<-chan struct{}, func()) { return s.watchers.Watch(id) }

// wake wakes every watcher of id.
func (s *Store) wake(id store.Identity) { s.watchers.Wake(id) }

// Ping implements store.Store: it checks that the file is open and holds
// the store's buckets. Errors wrap store.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	return s.view(ctx, "ping", func(tx *bbolt.Tx, _ int64) error {
		_, _, err := buckets(tx)
		return err
	})
}

// Close stops the background sweep, wakes every watcher, present and
// future (their re-Claim then fails closed), and closes the file, releasing
// its lock. It is safe
// to call more than once; later calls return the first call's error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.sweeper.Stop()
		s.watchers.Close()
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("bolt store: close: %w", err)
		}
	})
	return s.closeErr
}

// Len returns the number of records in the file, expired ones not yet
// swept included (for tests and metrics). Errors wrap store.ErrUnavailable.
func (s *Store) Len(ctx context.Context) (int, error) {
	n := 0
	err := s.view(ctx, "len", func(tx *bbolt.Tx, _ int64) error {
		records, _, err := buckets(tx)
		if err != nil {
			return err
		}
		n = records.Stats().KeyN
		return nil
	})
	return n, err
}
