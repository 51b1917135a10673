package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LayoutVersion is the value of the version column of every row this
// package writes (layout 3 of docs/protocol.md: identity = owner + scope +
// key, each row keeping its fingerprint recipe, a completed row keeping
// its response in the one response column, the body compressed by
// layout.BodyCodec). Rows of layout 2 (status, headers, body, omitted and
// trailers columns) are still read, by their version column.
const LayoutVersion = 3

// layout2 is the version column of rows written before layout 3
// (docs/protocol.md, "Layout versions"), and by builds from before it during a
// rolling upgrade.
const layout2 = 2

// maxTablePart bounds each part of Options.Table in bytes, so that the
// index name (table + "_expiry") fits PostgreSQL's 63-byte identifiers.
const maxTablePart = 56

// migrateLockKey is the pg_advisory_xact_lock key that serializes
// migrations between replicas starting at once and `idemgate migrate`:
// "idemgate" in ASCII.
const migrateLockKey int64 = 0x6964656d67617465

// ValidateTable checks a table name as Options.Table takes it: "name" or
// "schema.name", each part 1..56 bytes of lowercase ASCII letters, digits
// and underscores, not starting with a digit. Quoting then keeps it exactly
// as written (no case folding surprises).
func ValidateTable(table string) error {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return fmt.Errorf("table %q: at most one dot (schema.name)", table)
	}
	for _, p := range parts {
		if p == "" || len(p) > maxTablePart {
			return fmt.Errorf("table %q: each part must be 1..%d bytes", table, maxTablePart)
		}
		for i, c := range p {
			if c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9') {
				continue
			}
			return fmt.Errorf("table %q: use lowercase letters, digits and underscores only, not starting with a digit", table)
		}
	}
	return nil
}

// QuoteTable validates table (ValidateTable) and returns it quoted for SQL:
// "name" or "schema"."name".
func QuoteTable(table string) (string, error) {
	if err := ValidateTable(table); err != nil {
		return "", fmt.Errorf("postgres store: %w", err)
	}
	return pgx.Identifier(strings.Split(table, ".")).Sanitize(), nil
}

// indexName is the unqualified name of the expiry index of table: its last
// part + "_expiry" (it lives in the table's schema).
func indexName(table string) string {
	parts := strings.Split(table, ".")
	return parts[len(parts)-1] + "_expiry"
}

// indexTableName is the quoted name of table's resource index table
// (Store.Index and Store.Tombstone): the quoted table q with "_index" appended to its
// last part, e.g. "idemgate_records_index".
func indexTableName(q string) string { return q[:len(q)-1] + `_index"` }

// versionTableName is the quoted name of table's schema version table
// (migrate.go): the quoted table q with "_schema" appended to its last
// part, e.g. "idemgate_records_schema" (at most 63 bytes).
func versionTableName(q string) string { return q[:len(q)-1] + `_schema"` }

// VersionTable returns the name of the schema version table that goes
// with the records table named table (Options.Table's form): table +
// "_schema", e.g. "idemgate_records_schema". Only migrations read and
// write it; the serving role needs no grant on it.
func VersionTable(table string) string { return table + "_schema" }

// IndexTable returns the name of the resource index table that goes with
// the records table named table (Options.Table's form, name or
// schema.name): table + "_index", e.g. "idemgate_records_index". idemgate
// needs both tables, so operators grant on both and migrate creates both.
func IndexTable(table string) string { return table + "_index" }

// indexExpiryName is the unqualified name of the expiry index of the
// resource index table: the table's last part + "_iexp" (at most 61 bytes).
func indexExpiryName(table string) string {
	parts := strings.Split(table, ".")
	return parts[len(parts)-1] + "_iexp"
}

// oldStateCheck is pg_get_constraintdef of the state column's CHECK in a
// table created before tombstones (states 1 and 2 only); the migration
// replaces it with one that admits 3 (gone).
const oldStateCheck = `CHECK ((state = ANY (ARRAY[1, 2])))`

// Channel returns the notification channel of table (as given in
// Options.Table): table + "_events" (e.g. idemgate_records_events) when
// that fits a 63-byte identifier, else "idemgate_events_" + the first 16
// hex digits of the SHA-256 of table.
func Channel(table string) string {
	if c := table + "_events"; len(c) <= 63 {
		return c
	}
	sum := sha256.Sum256([]byte(table))
	return "idemgate_events_" + hex.EncodeToString(sum[:8])
}

// migrateErr reports a refused DDL statement (no rights, ...) as itself and
// anything else as unavailability.
func migrateErr(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !retryableCode(pgErr.Code) && !strings.HasPrefix(pgErr.Code, "57") && !strings.HasPrefix(pgErr.Code, "08") {
		return fmt.Errorf("postgres store: migrate: %w", err)
	}
	return unavailable("migrate", withCtx(ctx, err))
}

// errOldStateCheck says the table's state CHECK predates the gone state.
var errOldStateCheck = errors.New("state CHECK of a layout before tombstones")

// prepareSchema checks that the table has every column of the layout,
// applying the pending migrations first (migrate) when it is missing or
// lacks one and create is true. A role with
// only SELECT, INSERT, UPDATE and DELETE on an existing table passes.
func (s *Store) prepareSchema(ctx context.Context, table string, create bool) error {
	// The three checks go in one batch: one round trip at start instead of
	// three, so a lazy start is ready sooner. The first that fails is the
	// error; the server skips the rest.
	check := func() error {
		b := &pgx.Batch{}
		b.Queue(s.sql.check[0])
		b.Queue(s.sql.check[1])
		b.Queue(s.sql.check[2], s.table, oldStateCheck)
		br := s.pool.SendBatch(ctx, b)
		var old bool
		err := func() error {
			if _, err := br.Exec(); err != nil {
				return err
			}
			if _, err := br.Exec(); err != nil {
				return err
			}
			return br.QueryRow().Scan(&old)
		}()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if old {
			return errOldStateCheck
		}
		return nil
	}
	err := check()
	var pgErr *pgconn.PgError
	// undefined_table, or undefined_column: a table of an earlier build,
	// which the migration extends (ADD COLUMN IF NOT EXISTS).
	if err != nil && (errors.Is(err, errOldStateCheck) || errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703")) && create {
		if _, err := migrate(ctx, s.pool, table); err != nil {
			if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
				return fmt.Errorf("postgres store: the records table %s or the resource index table %s does not exist or lacks a column, and this role may not change them; run `idemgate migrate --config FILE` with a role that may: %w", s.table, indexTableName(s.table), err)
			}
			return err
		}
		err = check()
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, errOldStateCheck) {
		return fmt.Errorf("postgres store: table %s was created before tombstones (its state CHECK admits no gone state); run `idemgate migrate --config FILE`: %w", s.table, err)
	}
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "42P01":
			return fmt.Errorf("postgres store: the records table %s or the resource index table %s does not exist; run `idemgate migrate --config FILE` with a role that may create them: %w", s.table, indexTableName(s.table), err)
		case pgErr.Code == "42703":
			return fmt.Errorf("postgres store: table %s lacks a column of layout %d (docs/protocol.md, \"Store records (Postgres)\"); run `idemgate migrate --config FILE`: %w", s.table, LayoutVersion, err)
		case pgErr.Code == "42501":
			return fmt.Errorf("postgres store: the role may not read the records table %s or the resource index table %s (grant SELECT, INSERT, UPDATE, DELETE on both tables, and USAGE on their schema): %w", s.table, indexTableName(s.table), err)
		}
	}
	return unavailable("schema check", withCtx(ctx, err))
}
