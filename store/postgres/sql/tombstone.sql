-- Tombstone. $1 index digest, $2 now, $3 channel. Every entry at the
-- digest is spent and deleted; the rows still holding the completion an
-- entry saw become tombstones.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($2::timestamptz, clock_timestamp())) AS now), u AS (
  UPDATE "idemgate_records" r SET state = 3, fingerprint = ''::bytea, recipe = ''::bytea, token = NULL, takeover = false,
    lease_end = NULL, status = NULL, headers = NULL, body = NULL, omitted = NULL, stored_at = NULL, trailers = NULL,
    response = NULL
  FROM "idemgate_records_index" i, n
  WHERE i.digest = $1 AND r.id = i.id AND r.state = 2 AND r.stored_at = i.stored_at
    AND (r.expiry IS NULL OR r.expiry > n.now)
  RETURNING r.id
), d AS (
  DELETE FROM "idemgate_records_index" i WHERE i.digest = $1
)
SELECT u.id, pg_notify($3, encode(u.id, 'hex'))::text FROM u;
