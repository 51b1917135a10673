package postgres

import (
	"context"
	"time"
)

const (
	// sweepStatementTimeout bounds one sweep statement.
	sweepStatementTimeout = 30 * time.Second
	// maxSweepBatches bounds the statements of one sweep; the rest waits
	// for the next one.
	maxSweepBatches = 100
)

// Sweep implements store.Sweeper: it deletes rows whose expiry has passed (expiry <= now on the database
// clock), then the expired rows of the resource index table (not counted), in statements of at most Options.SweepBatch rows each, skipping
// rows locked by a concurrent operation, until a statement deletes fewer
// than a batch or 100 statements ran. It returns how many rows it deleted.
// Expired rows are absent to every operation whether swept or not; the
// sweep only keeps the table from growing. Errors wrap store.ErrUnavailable.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	total := 0
	for range maxSweepBatches {
		var n int
		err := s.run(ctx, "sweep", retryUnsent, func(ctx context.Context) error {
			sctx, cancel := context.WithTimeout(ctx, sweepStatementTimeout)
			defer cancel()
			tag, err := s.pool.Exec(sctx, s.sql.sweep, s.now(), s.sweepBatch)
			n = int(tag.RowsAffected())
			return err
		})
		total += n
		if err != nil {
			return total, err
		}
		if n < s.sweepBatch {
			break
		}
	}
	return total, s.sweepIndex(ctx)
}

// sweepIndex deletes the resource index rows whose expiry has passed, in
// statements of at most Options.SweepBatch rows like Sweep. Errors wrap
// store.ErrUnavailable.
func (s *Store) sweepIndex(ctx context.Context) error {
	for range maxSweepBatches {
		var n int
		err := s.run(ctx, "sweep", retryUnsent, func(ctx context.Context) error {
			sctx, cancel := context.WithTimeout(ctx, sweepStatementTimeout)
			defer cancel()
			tag, err := s.pool.Exec(sctx, s.sql.sweepIndex, s.now(), s.sweepBatch)
			n = int(tag.RowsAffected())
			return err
		})
		if err != nil {
			return err
		}
		if n < s.sweepBatch {
			return nil
		}
	}
	return nil
}
