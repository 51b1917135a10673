-- Schema version 1: the records table with its partial expiry index, the
-- resource index table with its own, and the state CHECK admitting 3 (gone).
-- Every statement is idempotent, so it also brings a table an earlier build
-- created up to layout 3 (the trailers and response columns, ADD COLUMN IF
-- NOT EXISTS; the DO block replaces a CHECK (state IN (1, 2)) written before
-- tombstones, NOT VALID: no scan, old rows are 1 or 2), and tables this
-- schema already describes are recorded as version 1 unchanged.
CREATE TABLE IF NOT EXISTS "idemgate_records" (
  id           bytea       NOT NULL PRIMARY KEY CHECK (octet_length(id) = 32),
  owner        bytea       NOT NULL,
  scope        bytea       NOT NULL,
  key          bytea       NOT NULL,
  state        smallint    NOT NULL CHECK (state IN (1, 2, 3)),
  fingerprint  bytea       NOT NULL,
  recipe       bytea       NOT NULL,
  token        bytea,
  takeover     boolean     NOT NULL DEFAULT false,
  created      timestamptz NOT NULL,
  lease_end    timestamptz,
  expiry       timestamptz,
  retention_ms bigint      NOT NULL CHECK (retention_ms >= 0),
  status       smallint,
  headers      bytea,
  body         bytea,
  omitted      boolean,
  stored_at    timestamptz,
  version      smallint    NOT NULL DEFAULT 2
);

CREATE INDEX IF NOT EXISTS "idemgate_records_expiry" ON "idemgate_records" (expiry) WHERE expiry IS NOT NULL;

ALTER TABLE "idemgate_records" ADD COLUMN IF NOT EXISTS trailers bytea;

DO $do$
DECLARE c name;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = '"idemgate_records"'::regclass
    AND contype = 'c' AND pg_get_constraintdef(oid) = 'CHECK ((state = ANY (ARRAY[1, 2])))'
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '"idemgate_records"', c);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (state IN (1, 2, 3)) NOT VALID', '"idemgate_records"', c);
  END LOOP;
END
$do$;

CREATE TABLE IF NOT EXISTS "idemgate_records_index" (
  digest    bytea       NOT NULL CHECK (octet_length(digest) = 32),
  id        bytea       NOT NULL CHECK (octet_length(id) = 32),
  stored_at timestamptz NOT NULL,
  expiry    timestamptz,
  PRIMARY KEY (digest, id)
);

CREATE INDEX IF NOT EXISTS "idemgate_records_iexp" ON "idemgate_records_index" (expiry) WHERE expiry IS NOT NULL;

ALTER TABLE "idemgate_records" ADD COLUMN IF NOT EXISTS response bytea;
