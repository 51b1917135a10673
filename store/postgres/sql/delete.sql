-- Delete. $1 id, $2 now, $3 channel.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($2::timestamptz, clock_timestamp())) AS now), d AS (
  DELETE FROM "idemgate_records" r USING n WHERE r.id = $1 AND (r.expiry IS NULL OR r.expiry > n.now)
  RETURNING r.id
)
SELECT pg_notify($3, encode(d.id, 'hex'))::text FROM d;
