-- The start-up check, sent as one batch: every column the statements name,
-- the resource index table, and whether the state CHECK predates tombstones
-- ($1 the records table, quoted; $2 that old CHECK as pg_get_constraintdef
-- prints it). A role with only SELECT, INSERT, UPDATE and DELETE passes.
SELECT id, owner, scope, key, state, fingerprint, recipe, token, takeover, created,
  lease_end, expiry, retention_ms, status, headers, body, omitted, stored_at, version, trailers, response FROM "idemgate_records" LIMIT 0;

SELECT digest, id, stored_at, expiry FROM "idemgate_records_index" LIMIT 0;

SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) = $2);
