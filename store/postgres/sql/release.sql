-- Release. $1 id, $2 token, $3 now, $4 channel.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($3::timestamptz, clock_timestamp())) AS now), d AS (
  DELETE FROM "idemgate_records" r USING n WHERE r.id = $1 AND r.state = 1 AND r.token = $2 AND r.expiry > n.now
  RETURNING r.id
)
SELECT pg_notify($4, encode(d.id, 'hex'))::text FROM d;
