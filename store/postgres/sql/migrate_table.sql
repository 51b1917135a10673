-- The schema version table: one row per migration applied, the schema's
-- version being the largest. It lives beside the records table, named after
-- it, so two tables in one schema keep their own versions.
CREATE TABLE IF NOT EXISTS "idemgate_records_schema" (
  version    integer     NOT NULL PRIMARY KEY CHECK (version >= 1),
  name       text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
