// Package bolt is a durable store.Store for a single idemgate instance, kept in one bbolt file that only one process may open at a time.
//
// File layout (also in docs/protocol.md, "Store records (bolt)"): bucket
// "meta" holds "version" = FormatVersion; bucket "records" maps
// RecordKey(identity) (SHA-256 of IdentityBytes, 32 bytes) to a record value;
// bucket "expiry" maps expiry_ms (8 bytes big-endian) + record key to an
// empty value, one entry per record that expires, so the sweep finds expired
// records in expiry order without reading the others. Bucket "index" maps
// IndexKey(resource) + record key to the stored_at_ms and expiry_ms of the
// completion indexed there (store.Tombstoner), and "index-expiry" maps
// expiry_ms + index key to an empty value for the sweep.
//
// A record value this build writes is format version 3 (record3.go;
// docs/protocol.md, "Record value (version 3)"): version, state and flags
// bytes, expiry_ms as 8 bytes big-endian at offset 3, varint times and
// status, uvarint-length fields (owner, scope, key, fingerprint, token,
// recipe, header, trailers), then the body to the end, compressed by
// layout.BodyCodec when that pays. Versions 1 and 2 (record.go: fixed 8-byte
// times, 4-byte lengths) are still read; a file is marked 3 when opened.
package bolt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
	"github.com/idemgate/idemgate/store/internal/sweep"
	"github.com/idemgate/idemgate/store/watch"
)

// DefaultSweepInterval is how often the background sweep runs by default.
const DefaultSweepInterval = time.Minute

// DefaultOpenTimeout is how long New waits for the file lock by default.
const DefaultOpenTimeout = time.Second

// appendFillPercent is the bbolt FillPercent of the expiry buckets, set in
// every transaction (bbolt does not keep it). Their keys start with
// expiry_ms, so new entries land at the end: at bbolt's default of 0.5
// every page left behind stays half empty, 117 bytes per record instead
// of 59 (TestFileSizePerCompletedRecord). The records bucket keeps the
// default: its SHA-256 keys land anywhere, and fuller splits measured
// larger there (809 bytes per record at 0.9 against 727).
const appendFillPercent = 1.0

// sweepBatch bounds how many expired records one sweep transaction removes,
// so the sweep never holds the write lock for long.
const sweepBatch = 1000

var (
	bucketMeta    = []byte("meta")
	bucketRecords = []byte("records")
	bucketExpiry  = []byte("expiry")
	// bucketIndex is the resource index (store.Tombstoner): IndexKey(res)
	// + record key -> stored_at_ms + expiry_ms of the completion indexed.
	bucketIndex = []byte("index")
	// bucketIndexExpiry maps expiry_ms + index entry key to an empty value,
	// one per index entry that expires, for the sweep.
	bucketIndexExpiry = []byte("index-expiry")
	keyVersion        = []byte("version")
)

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
	_ store.Store      = (*Store)(nil)
	_ store.Sweeper    = (*Store)(nil)
	_ store.Tombstoner = (*Store)(nil)
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

// errAbandoned makes a transaction roll back because its caller's context
// ended before the transaction started.
var errAbandoned = errors.New("caller gave up before the transaction started")

// Transaction phases for update's hand-off between caller and transaction.
const (
	phaseWaiting int32 = iota
	phaseRunning
	phaseAbandoned
)

// update runs fn in one write transaction. The write lock may be held by
// another transaction (and its fsync), so with a cancellable ctx it waits in
// a goroutine: if ctx ends before fn starts, the transaction is abandoned
// (it will roll back without changing anything) and update returns the
// context error at once; once fn has started, its outcome stands and is
// returned, so an error always means nothing was written.
func (s *Store) update(ctx context.Context, op string, fn func(tx *bbolt.Tx, nowMs int64) error) error {
	if err := ctx.Err(); err != nil {
		return unavailable(op, err)
	}
	run := func(tx *bbolt.Tx) error { return fn(tx, s.nowMs()) }
	if ctx.Done() == nil {
		if err := s.db.Update(run); err != nil {
			return unavailable(op, err)
		}
		return nil
	}
	var phase atomic.Int32
	result := make(chan error, 1)
	go func() {
		result <- s.db.Update(func(tx *bbolt.Tx) error {
			if !phase.CompareAndSwap(phaseWaiting, phaseRunning) {
				return errAbandoned
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			return run(tx)
		})
	}()
	select {
	case err := <-result:
		if err != nil {
			return unavailable(op, err)
		}
		return nil
	case <-ctx.Done():
		if phase.CompareAndSwap(phaseWaiting, phaseAbandoned) {
			return unavailable(op, ctx.Err())
		}
		if err := <-result; err != nil {
			return unavailable(op, err)
		}
		return nil
	}
}

// view runs fn in one read transaction, which never waits for writers.
func (s *Store) view(ctx context.Context, op string, fn func(tx *bbolt.Tx, nowMs int64) error) error {
	if err := ctx.Err(); err != nil {
		return unavailable(op, err)
	}
	if err := s.db.View(func(tx *bbolt.Tx) error { return fn(tx, s.nowMs()) }); err != nil {
		return unavailable(op, err)
	}
	return nil
}

func buckets(tx *bbolt.Tx) (records, expiry *bbolt.Bucket, err error) {
	records, expiry = tx.Bucket(bucketRecords), tx.Bucket(bucketExpiry)
	if records == nil || expiry == nil {
		return nil, nil, errors.New("buckets missing from the file")
	}
	expiry.FillPercent = appendFillPercent
	return records, expiry, nil
}

// load returns the record stored under key, or nil when there is none or
// it is past its expiry (treated as absent; removal is left to writes and
// the sweep).
func load(records *bbolt.Bucket, key []byte, id store.Identity, nowMs int64, codec *layout.BodyCodec) (*record, error) {
	v := records.Get(key)
	if v == nil {
		return nil, nil
	}
	r, err := decodeRecord(v, codec)
	if err != nil {
		return nil, err
	}
	if r.ID != id {
		// Two identities with one SHA-256: refuse rather than answer with
		// another owner's record.
		return nil, fmt.Errorf("%w: record key collision", errCorrupt)
	}
	if rules.Over(r.ExpiryMs, nowMs) {
		return nil, nil
	}
	return r, nil
}

// writer is the write side of one transaction on one identity.
type writer struct {
	records, expiry *bbolt.Bucket
	key             []byte
	codec           *layout.BodyCodec
	// oldExpiryMs is the expiry of the stored value (live or not), whose
	// expiry entry a write must replace; 0 when there is none.
	oldExpiryMs int64
}

// begin loads id's record for writing. An expired record is deleted on the
// spot (and reported as nil) so no stale value outlives the transaction.
func begin(tx *bbolt.Tx, id store.Identity, nowMs int64, codec *layout.BodyCodec) (*writer, *record, error) {
	records, expiry, err := buckets(tx)
	if err != nil {
		return nil, nil, err
	}
	w := &writer{records: records, expiry: expiry, key: RecordKey(id), codec: codec}
	if ms, _, ok := storedExpiry(records.Get(w.key)); ok {
		w.oldExpiryMs = ms
	}
	r, err := load(records, w.key, id, nowMs, codec)
	if err != nil {
		return nil, nil, err
	}
	if r == nil && w.oldExpiryMs != 0 && rules.Over(w.oldExpiryMs, nowMs) {
		if err := w.remove(); err != nil {
			return nil, nil, err
		}
	}
	return w, r, nil
}

// put stores r and moves its expiry entry.
func (w *writer) put(r *record) error {
	v, err := encodeRecord(r, w.codec)
	if err != nil {
		return err
	}
	if w.oldExpiryMs != r.ExpiryMs {
		if w.oldExpiryMs != 0 {
			if err := w.expiry.Delete(expiryKey(w.oldExpiryMs, w.key)); err != nil {
				return err
			}
		}
		if r.ExpiryMs != 0 {
			if err := w.expiry.Put(expiryKey(r.ExpiryMs, w.key), nil); err != nil {
				return err
			}
		}
	}
	if err := w.records.Put(w.key, v); err != nil {
		return err
	}
	w.oldExpiryMs = r.ExpiryMs
	return nil
}

// remove deletes the record and its expiry entry.
func (w *writer) remove() error {
	if w.oldExpiryMs != 0 {
		if err := w.expiry.Delete(expiryKey(w.oldExpiryMs, w.key)); err != nil {
			return err
		}
	}
	w.oldExpiryMs = 0
	return w.records.Delete(w.key)
}

// Claim implements store.Store. Answers that change nothing (Completed,
// Running, Abandoned) come from a read transaction, so replays do not queue
// behind writes; the rest is decided again inside one write transaction.
// Errors wrap store.ErrUnavailable, or store.ErrInvalid for parameters
// p.Validate rejects.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return store.ClaimResult{}, err
	}
	var (
		res  store.ClaimResult
		done bool
	)
	err := s.view(ctx, "claim", func(tx *bbolt.Tx, nowMs int64) error {
		records, _, err := buckets(tx)
		if err != nil {
			return err
		}
		r, err := load(records, RecordKey(p.Identity), p.Identity, nowMs, s.codec)
		if err != nil || r == nil {
			return err
		}
		res, done = rules.Answer(r, p, nowMs)
		return nil
	})
	if err != nil || done {
		return res, err
	}
	err = s.update(ctx, "claim", func(tx *bbolt.Tx, nowMs int64) error {
		w, r, err := begin(tx, p.Identity, nowMs, s.codec)
		if err != nil {
			return err
		}
		var next *record
		if res, next = rules.Claim(r, p, nowMs); next != nil {
			return w.put(next)
		}
		return nil
	})
	if err != nil {
		return store.ClaimResult{}, err
	}
	return res, nil
}

// holding is an update on id that acts only while the live record is
// running and holds token; act changes the record (w, r) and reports
// whether watchers must be woken.
func (s *Store) holding(ctx context.Context, op string, id store.Identity, token string, act func(w *writer, r *record, nowMs int64) (wake bool, err error)) (bool, error) {
	var did, wake bool
	err := s.update(ctx, op, func(tx *bbolt.Tx, nowMs int64) error {
		w, r, err := begin(tx, id, nowMs, s.codec)
		if err != nil {
			return err
		}
		if !rules.Holds(r, token) {
			return nil
		}
		wake, err = act(w, r, nowMs)
		did = err == nil
		return err
	})
	if err != nil {
		return false, err
	}
	if wake {
		s.wake(id)
	}
	return did, nil
}

// Complete implements store.Store. Errors wrap store.ErrUnavailable.
func (s *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	return s.holding(ctx, "complete", id, token, func(w *writer, r *record, nowMs int64) (bool, error) {
		stored := resp
		rules.Complete(r, &stored, nowMs)
		return true, w.put(r)
	})
}

// Release implements store.Store. Errors wrap store.ErrUnavailable.
func (s *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	return s.holding(ctx, "release", id, token, func(w *writer, _ *record, _ int64) (bool, error) {
		return true, w.remove()
	})
}

// Extend implements store.Store. Errors wrap store.ErrUnavailable, or
// store.ErrInvalid for a lease store.ValidateLease rejects.
func (s *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	if err := store.ValidateLease(lease); err != nil {
		return false, err
	}
	return s.holding(ctx, "extend", id, token, func(w *writer, r *record, nowMs int64) (bool, error) {
		rules.Extend(r, lease, nowMs)
		return false, w.put(r)
	})
}

// Get implements store.Store with a read transaction. Errors wrap
// store.ErrUnavailable.
func (s *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	var out *store.Record
	err := s.view(ctx, "get", func(tx *bbolt.Tx, nowMs int64) error {
		records, _, err := buckets(tx)
		if err != nil {
			return err
		}
		r, err := load(records, RecordKey(id), id, nowMs, s.codec)
		if err != nil || r == nil {
			return err
		}
		out = rules.Get(r, nowMs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete implements store.Store. Errors wrap store.ErrUnavailable.
func (s *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	var existed bool
	err := s.update(ctx, "delete", func(tx *bbolt.Tx, nowMs int64) error {
		w, r, err := begin(tx, id, nowMs, s.codec)
		if err != nil || r == nil {
			return err
		}
		existed = true
		return w.remove()
	})
	if err != nil {
		return false, err
	}
	if existed {
		s.wake(id)
	}
	return existed, nil
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

// Sweep implements store.Sweeper: it removes every record past its expiry,
// and the resource index entries of expired records (not counted), at
// most 1000 of each per write transaction so writers never wait long, and
// returns how many it removed. The background sweep calls it. It stops
// early with an error wrapping store.ErrUnavailable when ctx ends or a
// transaction fails.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		removed, seen, seenIndex := 0, 0, 0
		err := s.update(ctx, "sweep", func(tx *bbolt.Tx, nowMs int64) error {
			var err error
			if removed, seen, err = sweepOnce(tx, nowMs); err != nil {
				return err
			}
			seenIndex, err = sweepIndexOnce(tx, nowMs)
			return err
		})
		if err != nil {
			return total, err
		}
		total += removed
		if seen < sweepBatch && seenIndex < sweepBatch {
			return total, nil
		}
	}
}

// sweepOnce handles up to sweepBatch due expiry entries and returns how
// many records it removed and how many entries it handled. Keys are
// collected before deleting because deleting under a bbolt cursor can skip
// entries.
func sweepOnce(tx *bbolt.Tx, nowMs int64) (removed, seen int, err error) {
	records, expiry, err := buckets(tx)
	if err != nil {
		return 0, 0, err
	}
	var due [][]byte
	c := expiry.Cursor()
	for k, _ := c.First(); k != nil && len(due) < sweepBatch; k, _ = c.Next() {
		if len(k) != 8+32 {
			return 0, 0, fmt.Errorf("%w: expiry entry of %d bytes", errCorrupt, len(k))
		}
		if !rules.Over(int64(binary.BigEndian.Uint64(k)), nowMs) {
			break
		}
		due = append(due, bytes.Clone(k))
	}
	for _, k := range due {
		key := k[8:]
		// Only remove the record if this entry is still its expiry; an
		// entry left behind by a bug must not delete a live record.
		if _, raw, ok := storedExpiry(records.Get(key)); ok && bytes.Equal(raw, k[:8]) {
			if err := records.Delete(key); err != nil {
				return 0, 0, err
			}
			removed++
		}
		if err := expiry.Delete(k); err != nil {
			return 0, 0, err
		}
	}
	return removed, len(due), nil
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

// IndexKey is the prefix of the index entries of res in the index bucket:
// the SHA-256 of Owner, Scope and Path encoded like IdentityBytes (each an
// 8-byte big-endian length then its bytes), 32 bytes. An entry's key is
// IndexKey(res) followed by the 32-byte record key.
func IndexKey(res store.Resource) []byte {
	sum := sha256.Sum256(layout.ResourceBytes(res))
	return sum[:]
}

// indexBuckets returns the index and index-expiry buckets.
func indexBuckets(tx *bbolt.Tx) (index, indexExpiry *bbolt.Bucket, err error) {
	index, indexExpiry = tx.Bucket(bucketIndex), tx.Bucket(bucketIndexExpiry)
	if index == nil || indexExpiry == nil {
		return nil, nil, errors.New("index buckets missing from the file")
	}
	indexExpiry.FillPercent = appendFillPercent
	return index, indexExpiry, nil
}

// indexEntryLen is the length of an index entry value: stored_at_ms and
// expiry_ms, 8 bytes big-endian each.
const indexEntryLen = 16

// deleteIndexEntry removes the index entry k (value v) and its
// index-expiry entry.
func deleteIndexEntry(index, indexExpiry *bbolt.Bucket, k, v []byte) error {
	if len(v) == indexEntryLen {
		if exp := int64(binary.BigEndian.Uint64(v[8:])); exp != 0 {
			if err := indexExpiry.Delete(expiryKey(exp, k)); err != nil {
				return err
			}
		}
	}
	return index.Delete(k)
}

// Index implements store.Tombstoner in one write transaction: it records
// the stored-at time (and expiry) of id's completed record under the index
// of Resource{id.Owner, id.Scope, path}; an absent, running or gone record
// is not indexed. Errors wrap store.ErrUnavailable.
func (s *Store) Index(ctx context.Context, path string, id store.Identity) error {
	return s.update(ctx, "index", func(tx *bbolt.Tx, nowMs int64) error {
		records, _, err := buckets(tx)
		if err != nil {
			return err
		}
		index, indexExpiry, err := indexBuckets(tx)
		if err != nil {
			return err
		}
		rkey := RecordKey(id)
		r, err := load(records, rkey, id, nowMs, s.codec)
		if err != nil || !rules.Indexable(r) {
			return err
		}
		k := append(IndexKey(store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path}), rkey...)
		if old := index.Get(k); old != nil {
			if err := deleteIndexEntry(index, indexExpiry, k, bytes.Clone(old)); err != nil {
				return err
			}
		}
		v := make([]byte, 0, indexEntryLen)
		v = binary.BigEndian.AppendUint64(v, uint64(r.StoredAtMs))
		v = binary.BigEndian.AppendUint64(v, uint64(r.ExpiryMs))
		if r.ExpiryMs != 0 {
			if err := indexExpiry.Put(expiryKey(r.ExpiryMs, k), nil); err != nil {
				return err
			}
		}
		return index.Put(k, v)
	})
}

// Tombstone implements store.Tombstoner in one write transaction: every
// live completed record indexed at res whose stored-at time is the one
// its entry saw becomes a tombstone (state gone, same identity and expiry,
// no fingerprint, recipe or response); every entry of res is then spent
// and removed. It returns how many records it turned. Errors wrap
// store.ErrUnavailable.
func (s *Store) Tombstone(ctx context.Context, res store.Resource) (int, error) {
	n := 0
	err := s.update(ctx, "tombstone", func(tx *bbolt.Tx, nowMs int64) error {
		n = 0
		records, expiry, err := buckets(tx)
		if err != nil {
			return err
		}
		index, indexExpiry, err := indexBuckets(tx)
		if err != nil {
			return err
		}
		prefix := IndexKey(res)
		var keys, vals [][]byte
		c := index.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			keys, vals = append(keys, bytes.Clone(k)), append(vals, bytes.Clone(v))
		}
		for i, k := range keys {
			v := vals[i]
			if err := deleteIndexEntry(index, indexExpiry, k, v); err != nil {
				return err
			}
			if len(k) != 64 || len(v) != indexEntryLen {
				return fmt.Errorf("%w: index entry of %d+%d bytes", errCorrupt, len(k), len(v))
			}
			rkey := k[32:]
			raw := records.Get(rkey)
			if raw == nil {
				continue
			}
			r, err := decodeRecord(raw, s.codec)
			if err != nil {
				return err
			}
			if r.ID.Owner != res.Owner || r.ID.Scope != res.Scope || !bytes.Equal(RecordKey(r.ID), rkey) {
				return fmt.Errorf("%w: index entry names another owner's record", errCorrupt)
			}
			if rules.Over(r.ExpiryMs, nowMs) || !rules.Tombstoned(r, int64(binary.BigEndian.Uint64(v))) {
				continue
			}
			w := &writer{records: records, expiry: expiry, key: rkey, oldExpiryMs: r.ExpiryMs, codec: s.codec}
			if err := w.put(rules.Tombstone(r)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// sweepIndexOnce removes up to sweepBatch index entries past their
// record's expiry and returns how many index-expiry entries it handled.
func sweepIndexOnce(tx *bbolt.Tx, nowMs int64) (seen int, err error) {
	index, indexExpiry, err := indexBuckets(tx)
	if err != nil {
		return 0, err
	}
	var due [][]byte
	c := indexExpiry.Cursor()
	for k, _ := c.First(); k != nil && len(due) < sweepBatch; k, _ = c.Next() {
		if len(k) != 8+64 {
			return 0, fmt.Errorf("%w: index expiry entry of %d bytes", errCorrupt, len(k))
		}
		if !rules.Over(int64(binary.BigEndian.Uint64(k)), nowMs) {
			break
		}
		due = append(due, bytes.Clone(k))
	}
	for _, k := range due {
		ik := k[8:]
		// Only remove the index entry if this is still its expiry.
		if v := index.Get(ik); len(v) == indexEntryLen && bytes.Equal(v[8:], k[:8]) {
			if err := index.Delete(ik); err != nil {
				return 0, err
			}
		}
		if err := indexExpiry.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(due), nil
}
