-- Complete. $1 id, $2 token, $3 response (layout 3), $4 now, $5 channel.
-- The layout 2 columns are cleared, so the version column alone says where
-- the response is. One row, and one notification, when it completed.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($4::timestamptz, clock_timestamp())) AS now), u AS (
  UPDATE "idemgate_records" r SET state = 2, token = NULL, takeover = false, lease_end = NULL,
    status = NULL, headers = NULL, body = NULL, omitted = NULL, trailers = NULL,
    response = $3, version = 3, stored_at = n.now,
    expiry = CASE WHEN r.retention_ms > 0 THEN n.now + r.retention_ms * interval '1 millisecond' END
  FROM n WHERE r.id = $1 AND r.state = 1 AND r.token = $2 AND r.expiry > n.now
  RETURNING r.id
)
SELECT pg_notify($5, encode(u.id, 'hex'))::text FROM u;
