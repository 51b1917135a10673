// The buckets of the file and the transactions every operation runs in:
// update (one write transaction a cancelled caller can abandon before it
// starts), view, and the writer that keeps a record and its expiry entry
// together.

package bolt

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	bbolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
)

// appendFillPercent is the bbolt FillPercent of the expiry buckets, set in
// every transaction (bbolt does not keep it). Their keys start with
// expiry_ms, so new entries land at the end: at bbolt's default of 0.5
// every page left behind stays half empty, 117 bytes per record instead
// of 59 (TestFileSizePerCompletedRecord). The records bucket keeps the
// default: its SHA-256 keys land anywhere, and fuller splits measured
// larger there (809 bytes per record at 0.9 against 727).
const appendFillPercent = 1.0

var (
	bucketMeta    = []byte("meta")
	bucketRecords = []byte("records")
	bucketExpiry  = []byte("expiry")
	// bucketIndex is the resource index (Store.Index and Store.Tombstone): IndexKey(res)
	// + record key -> stored_at_ms + expiry_ms of the completion indexed.
	bucketIndex = []byte("index")
	// bucketIndexExpiry maps expiry_ms + index entry key to an empty value,
	// one per index entry that expires, for the sweep.
	bucketIndexExpiry = []byte("index-expiry")
	keyVersion        = []byte("version")
)

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
