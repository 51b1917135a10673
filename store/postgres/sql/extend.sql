-- Extend. $1 id, $2 token, $3 lease ms, $4 now. One row affected when it
-- extended.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($4::timestamptz, clock_timestamp())) AS now)
UPDATE "idemgate_records" r SET lease_end = n.now + $3::bigint * interval '1 millisecond',
  expiry = CASE WHEN r.retention_ms > 0 THEN greatest(r.expiry, n.now + $3::bigint * interval '1 millisecond')
                ELSE n.now + $3::bigint * interval '1 millisecond' + interval '24 hours' END
FROM n WHERE r.id = $1 AND r.state = 1 AND r.token = $2 AND r.expiry > n.now;
