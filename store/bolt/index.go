// The resource index and tombstones (Store.Index and Store.Tombstone): the index and
// index-expiry buckets.

package bolt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/internal/rules"
)

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

// Index implements store.Store in one write transaction: it records
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

// Tombstone implements store.Store in one write transaction: every
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
