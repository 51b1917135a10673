package postgres

import (
	_ "embed"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

// Every statement lives in a file of sql/ (the schema in migration/, see
// migrate.go), written for the default table, so that it can be read, and
// run by hand, as it is sent: leading "--" lines are its documentation and
// are not sent, a file of several statements separates them by ";" and a
// blank line, and the final ";" is not sent. Before sending, the names of
// the default table's objects, double-quoted ("idemgate_records",
// "idemgate_records_index", "idemgate_records_expiry",
// "idemgate_records_iexp", "idemgate_records_schema"), become those of
// Options.Table, and interval '24 hours' becomes store.AbandonedKeep, so the
// rule has one value in every driver. docs/protocol.md links to each file
// (TestStatementsInProtocolDoc).
var (
	//go:embed sql/claim.sql
	claimSQL string
	//go:embed sql/complete.sql
	completeSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/extend.sql
	extendSQL string
	//go:embed sql/delete.sql
	deleteSQL string
	//go:embed sql/get.sql
	getSQL string
	//go:embed sql/sweep.sql
	sweepSQL string
	//go:embed sql/index.sql
	indexSQL string
	//go:embed sql/tombstone.sql
	tombstoneSQL string
	//go:embed sql/index_sweep.sql
	indexSweepSQL string
	//go:embed sql/check.sql
	checkSQL string
	//go:embed sql/migrate_lock.sql
	migrateLockSQL string
	//go:embed sql/migrate_table.sql
	migrateTableSQL string
	//go:embed sql/migrate_version.sql
	migrateVersionSQL string
	//go:embed sql/migrate_record.sql
	migrateRecordSQL string
)

// statements holds the SQL of every operation for one table.
type statements struct {
	claim, complete, release, extend, del, get, sweep string
	index, tombstone, sweepIndex                      string
	// check is the start-up check's batch: the records table's columns,
	// the resource index table, the old state CHECK.
	check []string
	// The migration's own statements: the advisory lock, the version
	// table, its version, a version applied.
	migrateLock, migrateTable, migrateVersion, migrateRecord string
}

// buildStatements returns the statements for table, validated, in the
// unquoted form of Options.Table.
func buildStatements(table string) statements {
	fill := templateFor(table)
	one := func(src string) string { return fill(splitSQL(src)[0]) }
	var check []string
	for _, stmt := range splitSQL(checkSQL) {
		check = append(check, fill(stmt))
	}
	return statements{
		claim: one(claimSQL), complete: one(completeSQL), release: one(releaseSQL),
		extend: one(extendSQL), del: one(deleteSQL), get: one(getSQL), sweep: one(sweepSQL),
		index: one(indexSQL), tombstone: one(tombstoneSQL), sweepIndex: one(indexSweepSQL),
		check:       check,
		migrateLock: one(migrateLockSQL), migrateTable: one(migrateTableSQL),
		migrateVersion: one(migrateVersionSQL), migrateRecord: one(migrateRecordSQL),
	}
}

// templateFor returns the function that turns a statement written for the
// default table into the one for table (validated, unquoted form).
func templateFor(table string) func(string) string {
	def, _ := QuoteTable(DefaultTable)
	q, _ := QuoteTable(table)
	// keep is store.AbandonedKeep in whole hours (TestAbandonedKeepIsADay
	// pins it at 24): a time interval, never days, which would follow
	// daylight saving in the session time zone.
	keep := "interval '" + strconv.FormatInt(int64(store.AbandonedKeep/time.Hour), 10) + " hours'"
	r := strings.NewReplacer(
		indexTableName(def), indexTableName(q),
		versionTableName(def), versionTableName(q),
		pgx.Identifier{indexName(DefaultTable)}.Sanitize(), pgx.Identifier{indexName(table)}.Sanitize(),
		pgx.Identifier{indexExpiryName(DefaultTable)}.Sanitize(), pgx.Identifier{indexExpiryName(table)}.Sanitize(),
		def, q,
		"interval '24 hours'", keep,
	)
	return r.Replace
}

// splitSQL returns the statements of a file of sql/ or migration/: its
// text without the "--" lines that open each statement, split at a ";"
// that ends a line followed by a blank line, each without its final ";".
func splitSQL(src string) []string {
	var out []string
	for _, chunk := range strings.Split(strings.TrimSpace(src), ";\n\n") {
		lines := strings.Split(strings.TrimSpace(chunk), "\n")
		for len(lines) > 0 && strings.HasPrefix(lines[0], "--") {
			lines = lines[1:]
		}
		if stmt := strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";"); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}
