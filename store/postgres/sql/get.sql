-- Get. $1 id, $2 now. The store shows a running row whose lease_end <= now
-- as abandoned.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($2::timestamptz, clock_timestamp())) AS now)
SELECT n.now, r.owner, r.scope, r.key, r.state, r.fingerprint, r.recipe, r.token, r.created,
  r.lease_end, r.expiry, r.status, r.headers, r.body, r.omitted, r.stored_at, r.trailers, r.response, r.version
FROM "idemgate_records" r, n WHERE r.id = $1 AND (r.expiry IS NULL OR r.expiry > n.now);
