package valkey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/valkey-io/valkey-go"
)

// IndexKey returns the index key of res under prefix: prefix + "index:{" +
// lowercase hex SHA-256 of ResourceBytes(res) + "}" (docs/protocol.md,
// "Resource index"). Its hash tag is its own digest, so in a Cluster the
// index and the records it names live in different slots.
func IndexKey(prefix string, res store.Resource) string {
	sum := sha256.Sum256(ResourceBytes(res))
	return prefix + "index:{" + hex.EncodeToString(sum[:]) + "}"
}

// ResourceBytes is the encoding of res that IndexKey hashes: the identity
// encoding with Path in the key's place (docs/protocol.md, "Key layout").
func ResourceBytes(res store.Resource) []byte { return layout.ResourceBytes(res) }

// tag returns the hash tag of id's record key: the hex digest between its
// braces.
func tag(id store.Identity) string {
	sum := sha256.Sum256(IdentityBytes(id))
	return hex.EncodeToString(sum[:])
}

// Index implements store.Store: it reads the record of id (get.lua)
// and, when it is completed, adds tag ":" stored-at ms to the index of
// (id.Owner, id.Scope, path) with index.lua, scored by the record's
// expiry. Errors wrap store.ErrUnavailable.
func (s *Store) Index(ctx context.Context, path string, id store.Identity) error {
	if err := ctx.Err(); err != nil {
		return unavailable("index", err)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if r == nil || r.State != store.Completed || r.Response == nil {
		return nil
	}
	storedAt, expiry := "0", "0"
	if !r.Response.StoredAt.IsZero() {
		storedAt = strconv.FormatInt(r.Response.StoredAt.UnixMilli(), 10)
	}
	if !r.RetentionEnd.IsZero() {
		expiry = strconv.FormatInt(r.RetentionEnd.UnixMilli(), 10)
	}
	key := IndexKey(s.prefix, store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path})
	_, _, err = s.execKey(ctx, "index", s.index, key, tag(id)+":"+storedAt, expiry)
	return err
}

// Tombstone implements store.Store: it reads the index of res
// (ZRANGE), runs tombstone.lua on the record of each entry, then removes
// the entries it read (ZREM). Each step is one key, so it works on a
// Cluster; a failure part way returns an error wrapping
// store.ErrUnavailable with the records turned so far counted, and a
// retry turns the rest (a record already turned is not counted again).
func (s *Store) Tombstone(ctx context.Context, res store.Resource) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, unavailable("tombstone", err)
	}
	idx := IndexKey(s.prefix, res)
	members, err := await(ctx, func() valkey.ValkeyResult {
		return s.client.Do(ctx, s.client.B().Zrange().Key(idx).Min("0").Max("-1").Build())
	}).AsStrSlice()
	if err != nil {
		return 0, unavailable("tombstone", ctxWrap(ctx, err))
	}
	n := 0
	for _, m := range members {
		h, storedAt, ok := strings.Cut(m, ":")
		if !ok || len(h) != sha256.Size*2 {
			// Not an entry this store writes: dropped below, never acted on.
			continue
		}
		out, key, err := s.execKey(ctx, "tombstone", s.tomb, s.prefix+"{"+h+"}", storedAt, s.channel)
		if err != nil {
			return n, err
		}
		turned, err := out.AsInt64()
		if err != nil {
			return n, unavailable("tombstone", fmt.Errorf("reply: %w", err))
		}
		if turned == 1 {
			n++
			s.wake(key)
		}
	}
	if len(members) > 0 {
		err := await(ctx, func() valkey.ValkeyResult {
			return s.client.Do(ctx, s.client.B().Zrem().Key(idx).Member(members...).Build())
		}).Error()
		if err != nil {
			return n, unavailable("tombstone", ctxWrap(ctx, err))
		}
	}
	return n, nil
}

// ctxWrap adds ctx's error to err when ctx is done and err does not wrap it.
func ctxWrap(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}
