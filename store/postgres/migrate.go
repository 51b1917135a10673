package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationFiles holds the schema, one numbered file per version:
// migration/NNN_name.up.sql, numbered from 001 without gaps, written for the
// default table like the files of sql/ (sql.go). A file, once released, is
// never edited: a change to the schema is a new file.
//
//go:embed migration/*.up.sql
var migrationFiles embed.FS

// ErrSchemaNewer is wrapped by Migrate, and by New when it would migrate,
// when the schema version table records a version this build does not
// know: a later build migrated the tables, and this one may not read them
// as it expects nor undo that.
var ErrSchemaNewer = errors.New("schema version newer than this build knows")

// MigrateResult says what Migrate found and did.
type MigrateResult struct {
	// From is the schema version found: 0 when none was recorded (no
	// tables, or tables of a build from before schema versions).
	From int
	// To is the schema version after Migrate: the latest this build knows.
	To int
	// Applied names the migration files applied, in order (e.g.
	// "001_initial_schema.up.sql"); empty when the schema was current.
	Applied []string
	// Adopted is true when the records table existed without a recorded
	// version, as a build from before schema versions left it. Migration 1
	// is idempotent: it changed only what an earlier layout lacked, kept
	// every row, and the tables were recorded as version 1.
	Adopted bool
}

// migration is one file of migration/.
type migration struct {
	version int
	name    string // file name, e.g. 001_initial_schema.up.sql
	src     string
}

// migrations returns the embedded migrations in version order. An error
// says a file is misnamed or a version missing or repeated (a broken
// build; TestMigrationFiles catches it).
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migration/*.up.sql")
	if err != nil {
		return nil, err
	}
	out := make([]migration, 0, len(names))
	for i, p := range names { // fs.Glob sorts, so 001 comes first
		name := path.Base(p)
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 3 || v != i+1 {
			return nil, fmt.Errorf("migration %s: want NNN_name.up.sql numbered %03d", name, i+1)
		}
		src, err := migrationFiles.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, src: string(src)})
	}
	if len(out) == 0 {
		return nil, errors.New("no migration embedded")
	}
	return out, nil
}

// SchemaVersion returns the latest schema version this build knows: the
// number of its last migration file; 0 when the embedded files are
// misnamed (a broken build, which TestMigrationFiles catches).
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// Schema returns the DDL of every migration, in order, as Migrate runs it
// for table (validated, unquoted form as in Options.Table), one statement
// each. Migration 1 is the records table and its partial expiry index, the
// trailers column, the state CHECK admitting 3 (gone), the resource index
// table table_index and its partial expiry index, and the response column
// of layout 3: idempotent, so a table an earlier build created gains what
// it lacks and its rows keep working. Migrate adds only the statements of
// its schema version table.
func Schema(table string) ([]string, error) {
	if _, err := QuoteTable(table); err != nil {
		return nil, err
	}
	ms, err := migrations()
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	fill := templateFor(table)
	var ddl []string
	for _, m := range ms {
		for _, stmt := range splitSQL(m.src) {
			ddl = append(ddl, fill(stmt))
		}
	}
	return ddl, nil
}

// Migrate brings the records table, the resource index table (IndexTable)
// and the schema version table (VersionTable) to the latest schema version
// this build knows, applying each pending migration and recording it, in
// one transaction holding pg_advisory_xact_lock so that replicas starting
// at once and `idemgate migrate` do not race; nothing else. Tables of a
// build from before schema versions are adopted (MigrateResult.Adopted). A
// second run applies nothing. It needs a role allowed to create tables in
// the schema. A recorded version newer than this build's is refused with
// an error wrapping ErrSchemaNewer; connection errors wrap
// store.ErrUnavailable.
func Migrate(ctx context.Context, opts Options) (MigrateResult, error) {
	cfg, err := PoolConfig(opts)
	if err != nil {
		return MigrateResult{}, err
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if _, err := QuoteTable(opts.Table); err != nil {
		return MigrateResult{}, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return MigrateResult{}, unavailable("migrate", withCtx(ctx, err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrate(ctx, conn, opts.Table)
}

// execer is what migrate needs from a connection or pool.
type execer interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrate applies the pending migrations to table (validated, unquoted).
func migrate(ctx context.Context, db execer, table string) (MigrateResult, error) {
	ms, err := migrations()
	if err != nil {
		return MigrateResult{}, fmt.Errorf("postgres store: %w", err)
	}
	st := buildStatements(table)
	fill := templateFor(table)
	q, _ := QuoteTable(table)
	tx, err := db.Begin(ctx)
	if err != nil {
		return MigrateResult{}, unavailable("migrate", withCtx(ctx, err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, st.migrateLock, migrateLockKey); err != nil {
		return MigrateResult{}, migrateErr(ctx, err)
	}
	if _, err := tx.Exec(ctx, st.migrateTable); err != nil {
		return MigrateResult{}, migrateErr(ctx, err)
	}
	var res MigrateResult
	var exists bool
	if err := tx.QueryRow(ctx, st.migrateVersion, q).Scan(&res.From, &exists); err != nil {
		return MigrateResult{}, migrateErr(ctx, err)
	}
	if res.From > len(ms) {
		return res, fmt.Errorf("postgres store: migrate: the tables of %s are at schema version %d and this build knows versions up to %d; run a build that knows version %d: %w",
			q, res.From, len(ms), res.From, ErrSchemaNewer)
	}
	res.To = res.From
	if !exists {
		// A version recorded for a records table since dropped: the
		// tables are made again, as a store that found them missing
		// always had them made.
		res.From = 0
	}
	res.Adopted = res.From == 0 && exists
	for _, m := range ms[res.From:] {
		for _, stmt := range splitSQL(m.src) {
			if _, err := tx.Exec(ctx, fill(stmt)); err != nil {
				return MigrateResult{}, migrateErr(ctx, fmt.Errorf("%s: %w", m.name, err))
			}
		}
		if _, err := tx.Exec(ctx, st.migrateRecord, m.version, m.name); err != nil {
			return MigrateResult{}, migrateErr(ctx, err)
		}
		res.Applied = append(res.Applied, m.name)
		res.To = m.version
	}
	if err := tx.Commit(ctx); err != nil {
		return MigrateResult{}, migrateErr(ctx, err)
	}
	return res, nil
}
