package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
)

// State values of the state column.
const (
	stateRunning   = 1
	stateCompleted = 2
	// stateGone is a tombstone (Store.Index and Store.Tombstone): empty fingerprint and
	// recipe, no token and no response, identity and expiry kept.
	stateGone = 3
)

// maxAttempts bounds how often one operation sends its statement.
const maxAttempts = 3

// retryRule says which failures an operation may send its statement again
// after.
type retryRule int

const (
	// retryUnsent: only when nothing reached the server (pgconn.SafeToRetry)
	// or the server refused the statement as a whole (serialization failure,
	// deadlock), i.e. when it cannot have applied. For Complete, Release and
	// Delete, whose second run would answer false.
	retryUnsent retryRule = iota
	// retryAny: also after a lost connection, when the statement may have
	// applied: Claim (a claim finding its own token answers Claimed again),
	// Extend (moves the lease forward again) and Get.
	retryAny
)

func retryableCode(code string) bool {
	return code == "40001" || code == "40P01" // serialization_failure, deadlock_detected
}

func shouldRetry(err error, rule retryRule) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if retryableCode(pgErr.Code) {
			return true
		}
		// 57P01..57P03: admin shutdown, crash shutdown, cannot connect now;
		// 08*: connection exceptions. The statement may have applied.
		return rule == retryAny && (strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08"))
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	return rule == retryAny && connErr(err)
}

// connErr reports whether err is a lost or refused connection.
func connErr(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// run calls fn until it succeeds, fails in a way rule does not retry, ctx
// ends or maxAttempts is reached. Errors wrap store.ErrUnavailable (and the
// context error once ctx is done).
func (s *Store) run(ctx context.Context, op string, rule retryRule, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return unavailable(op, err)
	}
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(ctx); err == nil {
			return nil
		}
		if attempt == maxAttempts || ctx.Err() != nil || !shouldRetry(err, rule) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
	return unavailable(op, withCtx(ctx, err))
}

// bs converts s to a non-nil byte slice: pgx sends a nil slice as NULL.
func bs(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

// errStale says the claim statement's fallback row is older than the row
// its upsert saw (a concurrent insert or change committed after the
// statement's snapshot): the statement wrote nothing and is sent again.
var errStale = errors.New("claim raced a concurrent change; statement sent again")

// maxStale bounds how often Claim re-sends its statement after errStale.
const maxStale = 10

// Claim implements store.Store with one INSERT ... ON CONFLICT DO UPDATE
// statement. Errors wrap store.ErrUnavailable, or store.ErrInvalid for
// parameters p.Validate rejects.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return store.ClaimResult{}, err
	}
	id := ID(p.Identity)
	var out store.ClaimResult
	for range maxStale {
		err := s.run(ctx, "claim", retryAny, func(ctx context.Context) error {
			var err error
			out, err = s.claimOnce(ctx, id, p)
			return err
		})
		if !errors.Is(err, errStale) {
			return out, err
		}
	}
	return store.ClaimResult{}, unavailable("claim", errStale)
}

func (s *Store) claimOnce(ctx context.Context, id []byte, p store.ClaimParams) (store.ClaimResult, error) {
	rows, err := s.pool.Query(ctx, s.sql.claim, id, bs(p.Identity.Owner), bs(p.Identity.Scope), bs(p.Identity.Key),
		bs(p.Fingerprint), bs(p.Token), p.Lease.Milliseconds(), p.Retention.Milliseconds(), p.NoTakeover, bs(p.Recipe), s.now())
	if err != nil {
		return store.ClaimResult{}, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return store.ClaimResult{}, err
		}
		// The conflicting row was inserted after this statement's snapshot.
		return store.ClaimResult{}, errStale
	}
	var (
		claimed, takeover, claimable bool
		now                          time.Time
		fp, recipe, token, hdr, body []byte
		trailers, packed             []byte
		leaseEnd, expiry, storedAt   *time.Time
		state, status, version       *int16
		omitted                      *bool
	)
	if err := rows.Scan(&claimed, &now, &fp, &recipe, &leaseEnd, &takeover, &state, &token,
		&expiry, &status, &hdr, &body, &omitted, &storedAt, &trailers, &packed, &version, &claimable); err != nil {
		return store.ClaimResult{}, err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return store.ClaimResult{}, err
	}
	if claimed {
		return store.ClaimResult{State: store.Claimed, Takeover: takeover, Fingerprint: string(fp), Recipe: string(recipe), LeaseEnd: *leaseEnd}, nil
	}
	if state == nil || claimable {
		// The upsert was refused although the snapshot's row was claimable:
		// the row changed after the snapshot.
		return store.ClaimResult{}, errStale
	}
	switch *state {
	case stateGone:
		return store.ClaimResult{State: store.Gone}, nil
	case stateCompleted:
		resp, err := s.response(version, packed, status, hdr, body, omitted, storedAt, trailers)
		if err != nil {
			return store.ClaimResult{}, err
		}
		return store.ClaimResult{State: store.Completed, Fingerprint: string(fp), Recipe: string(recipe), Response: resp}, nil
	case stateRunning:
		if leaseEnd == nil {
			return store.ClaimResult{}, errors.New("running row without lease_end")
		}
		out := store.ClaimResult{Fingerprint: string(fp), Recipe: string(recipe), LeaseEnd: *leaseEnd, State: store.Running}
		if !leaseEnd.After(now) {
			// Not claimable, so another fingerprint or NoTakeover.
			out.State = store.Abandoned
		}
		return out, nil
	}
	return store.ClaimResult{}, fmt.Errorf("row state %d", *state)
}

// response is the stored response of a completed row: from the response
// column in a row of layout 3, from the status, headers, body, omitted and
// trailers columns in a row of layout 2 (written before layout 3, or by
// an earlier build during a rolling upgrade). A row of layout 2 may keep a
// stale response column (an earlier build's claim does not clear it), so
// the version column decides, never the column's presence.
func (s *Store) response(version *int16, packed []byte, status *int16, hdr, body []byte, omitted *bool, storedAt *time.Time, trailers []byte) (*store.Response, error) {
	if version != nil && *version == LayoutVersion {
		if packed == nil || storedAt == nil {
			return nil, errors.New("completed row of layout 3 without response or stored_at")
		}
		return layout.DecodeResponse(s.codec, packed, *storedAt)
	}
	if version == nil {
		return nil, errors.New("completed row without version")
	}
	if *version != layout2 {
		return nil, fmt.Errorf("completed row of layout %d, this build reads %d and %d", *version, layout2, LayoutVersion)
	}
	if status == nil || storedAt == nil || omitted == nil {
		return nil, errors.New("completed row without status, omitted or stored_at")
	}
	h, err := layout.DecodeHeader(hdr)
	if err != nil {
		return nil, err
	}
	if body == nil {
		body = []byte{}
	}
	resp := &store.Response{Status: int(*status), Header: h, Body: body, Omitted: *omitted, StoredAt: *storedAt}
	if len(trailers) > 0 {
		if resp.Trailer, err = layout.DecodeHeader(trailers); err != nil {
			return nil, fmt.Errorf("trailers: %w", err)
		}
	}
	return resp, nil
}

// notifyOp runs a statement that returns one row per notified record and
// reports whether it acted, waking this process's watchers at once (the
// notification reaches them too; this saves its round trip).
func (s *Store) notifyOp(ctx context.Context, op string, id []byte, sql string, args ...any) (bool, error) {
	var acted bool
	err := s.run(ctx, op, retryUnsent, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		acted = n > 0
		return nil
	})
	if err != nil {
		return false, err
	}
	if acted {
		s.watchers.Wake(idKey(id))
	}
	return acted, nil
}

// Complete implements store.Store with one UPDATE ... WHERE token = $2
// that also calls pg_notify. Errors wrap store.ErrUnavailable; a Status
// outside 100..599 is rejected.
func (s *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	if resp.Status < 100 || resp.Status > 599 {
		return false, fmt.Errorf("postgres store: complete: status %d outside 100..599", resp.Status)
	}
	rowID := ID(id)
	return s.notifyOp(ctx, "complete", rowID, s.sql.complete, rowID, bs(token), layout.EncodeResponse(s.codec, resp), s.now(), s.channel)
}

// Release implements store.Store with one DELETE ... WHERE token = $2 that
// also calls pg_notify. Errors wrap store.ErrUnavailable.
func (s *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	rowID := ID(id)
	return s.notifyOp(ctx, "release", rowID, s.sql.release, rowID, bs(token), s.now(), s.channel)
}

// Delete implements store.Store with one DELETE that also calls pg_notify.
// Errors wrap store.ErrUnavailable.
func (s *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	rowID := ID(id)
	return s.notifyOp(ctx, "delete", rowID, s.sql.del, rowID, s.now(), s.channel)
}

// Extend implements store.Store with one UPDATE ... WHERE token = $2.
// Errors wrap store.ErrUnavailable, or store.ErrInvalid for a lease
// store.ValidateLease rejects.
func (s *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	if err := store.ValidateLease(lease); err != nil {
		return false, err
	}
	var n int64
	err := s.run(ctx, "extend", retryAny, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, s.sql.extend, ID(id), bs(token), lease.Milliseconds(), s.now())
		n = tag.RowsAffected()
		return err
	})
	return n == 1, err
}

// Get implements store.Store with one SELECT. Errors wrap
// store.ErrUnavailable.
func (s *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	var rec *store.Record
	err := s.run(ctx, "get", retryAny, func(ctx context.Context) error {
		var (
			now, created                       time.Time
			owner, scope, key, fp, recipe, tok []byte
			hdr, body, trailers, packed        []byte
			leaseEnd, expiry, storedAt         *time.Time
			state                              int16
			status, version                    *int16
			omitted                            *bool
		)
		err := s.pool.QueryRow(ctx, s.sql.get, ID(id), s.now()).Scan(&now, &owner, &scope, &key, &state, &fp, &recipe,
			&tok, &created, &leaseEnd, &expiry, &status, &hdr, &body, &omitted, &storedAt, &trailers, &packed, &version)
		if errors.Is(err, pgx.ErrNoRows) {
			rec = nil
			return nil
		}
		if err != nil {
			return err
		}
		r := &store.Record{
			Identity:    store.Identity{Owner: string(owner), Scope: string(scope), Key: string(key)},
			Fingerprint: string(fp),
			Recipe:      string(recipe),
			CreatedAt:   created,
		}
		if expiry != nil {
			r.RetentionEnd = *expiry
		}
		switch state {
		case stateGone:
			r.State = store.Gone
		case stateCompleted:
			r.State = store.Completed
			if r.Response, err = s.response(version, packed, status, hdr, body, omitted, storedAt, trailers); err != nil {
				return fmt.Errorf("%w: %w", errBadRow, err)
			}
		case stateRunning:
			if leaseEnd == nil {
				return fmt.Errorf("%w: running row without lease_end", errBadRow)
			}
			r.Token, r.LeaseEnd, r.State = string(tok), *leaseEnd, store.Running
			if !leaseEnd.After(now) {
				r.State = store.Abandoned
			}
		default:
			return fmt.Errorf("%w: state %d", errBadRow, state)
		}
		rec = r
		return nil
	})
	return rec, err
}

// errBadRow marks a row that does not follow the layout.
var errBadRow = errors.New("row does not follow the layout")

// IndexDigest is the index digest column of the entries of res in the
// resource index table: the SHA-256 of Owner, Scope and Path in the
// identity encoding of the Valkey store (Path in the key's place).
func IndexDigest(res store.Resource) []byte {
	sum := sha256.Sum256(layout.ResourceBytes(res))
	return sum[:]
}

// Index implements store.Store with one INSERT ... ON CONFLICT into
// the resource index table, which indexes id's row only while it is a live
// completed record. Errors wrap store.ErrUnavailable.
func (s *Store) Index(ctx context.Context, path string, id store.Identity) error {
	digest := IndexDigest(store.Resource{Owner: id.Owner, Scope: id.Scope, Path: path})
	return s.run(ctx, "index", retryAny, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, s.sql.index, digest, ID(id), s.now())
		return err
	})
}

// Tombstone implements store.Store with one UPDATE ... FROM the
// resource index table that also deletes the resource's entries and calls
// pg_notify for each row it turned. Errors wrap store.ErrUnavailable.
func (s *Store) Tombstone(ctx context.Context, res store.Resource) (int, error) {
	var ids [][]byte
	err := s.run(ctx, "tombstone", retryAny, func(ctx context.Context) error {
		ids = ids[:0]
		rows, err := s.pool.Query(ctx, s.sql.tombstone, IndexDigest(res), s.now(), s.channel)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id []byte
			var ignored string
			if err := rows.Scan(&id, &ignored); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		s.watchers.Wake(idKey(id))
	}
	return len(ids), nil
}
