-- Index. $1 index digest, $2 id, $3 now. Only a live completed row is
-- indexed, with the completion (stored_at) it saw.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($3::timestamptz, clock_timestamp())) AS now)
INSERT INTO "idemgate_records_index" AS i (digest, id, stored_at, expiry)
SELECT $1, r.id, r.stored_at, r.expiry FROM "idemgate_records" r, n
WHERE r.id = $2 AND r.state = 2 AND (r.expiry IS NULL OR r.expiry > n.now)
ON CONFLICT (digest, id) DO UPDATE SET stored_at = excluded.stored_at, expiry = excluded.expiry;
