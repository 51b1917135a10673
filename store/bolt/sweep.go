// The sweep (store.Sweeper): expired records and index entries found in
// expiry order through the expiry buckets, in bounded batches.

package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/store/internal/rules"
)

// sweepBatch bounds how many expired records one sweep transaction removes,
// so the sweep never holds the write lock for long.
const sweepBatch = 1000

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
