-- Claim. $1 id, $2 owner, $3 scope, $4 key, $5 fingerprint, $6 token,
-- $7 lease ms, $8 retention ms, $9 no takeover, $10 recipe, $11 now (NULL:
-- the database clock). cur reads the row as of the statement's snapshot.
-- Only when it is absent or claimable does the upsert run, answering true
-- (fresh, expired, repeated token or takeover); otherwise (a replay, a
-- running record) the statement writes and locks nothing, and the second
-- branch returns cur for the store to classify. In the upsert, on the
-- conflicting row r and the proposed row excluded (whose created is the
-- statement's now): expired is (r.expiry IS NOT NULL AND r.expiry <=
-- excluded.created), same is COALESCE(r.state = 1 AND r.token =
-- excluded.token, false), a repeated claim is NOT expired AND same.
WITH v AS MATERIALIZED (
  SELECT n.now, n.now + $7::bigint * interval '1 millisecond' AS lease_end,
    CASE WHEN $8::bigint > 0 THEN greatest(n.now + $7::bigint * interval '1 millisecond', n.now + $8::bigint * interval '1 millisecond')
         ELSE n.now + $7::bigint * interval '1 millisecond' + interval '24 hours' END AS expiry
  FROM (SELECT date_trunc('milliseconds', COALESCE($11::timestamptz, clock_timestamp())) AS now) n
), cur AS MATERIALIZED (
  SELECT r.fingerprint, r.recipe, r.lease_end, r.takeover, r.state, r.token, r.expiry, r.status,
    r.headers, r.body, r.omitted, r.stored_at, r.trailers, r.response, r.version,
    COALESCE((r.expiry IS NOT NULL AND r.expiry <= v.now) OR (r.state = 1 AND r.token = $6)
      OR (r.state = 1 AND r.lease_end <= v.now AND r.fingerprint = $5 AND NOT $9::boolean), false) AS claimable
  FROM "idemgate_records" r, v WHERE r.id = $1
), up AS (
  INSERT INTO "idemgate_records" AS r (id, owner, scope, key, state, fingerprint, recipe, token, takeover, created, lease_end, expiry, retention_ms, version)
  SELECT $1, $2, $3, $4, 1, $5, $10, $6, false, v.now, v.lease_end, v.expiry, $8, 3 FROM v
  WHERE NOT EXISTS (SELECT 1 FROM cur WHERE NOT cur.claimable)
  ON CONFLICT (id) DO UPDATE SET
    owner = excluded.owner, scope = excluded.scope, key = excluded.key, state = 1,
    fingerprint = CASE WHEN (NOT (r.expiry IS NOT NULL AND r.expiry <= excluded.created) AND COALESCE(r.state = 1 AND r.token = excluded.token, false)) THEN r.fingerprint ELSE excluded.fingerprint END,
    recipe = CASE WHEN (NOT (r.expiry IS NOT NULL AND r.expiry <= excluded.created) AND COALESCE(r.state = 1 AND r.token = excluded.token, false)) THEN r.recipe ELSE excluded.recipe END,
    token = excluded.token,
    takeover = CASE WHEN (r.expiry IS NOT NULL AND r.expiry <= excluded.created) THEN false WHEN COALESCE(r.state = 1 AND r.token = excluded.token, false) THEN r.takeover ELSE true END,
    created = CASE WHEN (NOT (r.expiry IS NOT NULL AND r.expiry <= excluded.created) AND COALESCE(r.state = 1 AND r.token = excluded.token, false)) THEN r.created ELSE excluded.created END,
    lease_end = excluded.lease_end,
    expiry = CASE WHEN (NOT (r.expiry IS NOT NULL AND r.expiry <= excluded.created) AND COALESCE(r.state = 1 AND r.token = excluded.token, false)) THEN greatest(r.expiry, excluded.expiry) ELSE excluded.expiry END,
    retention_ms = CASE WHEN (NOT (r.expiry IS NOT NULL AND r.expiry <= excluded.created) AND COALESCE(r.state = 1 AND r.token = excluded.token, false)) THEN r.retention_ms ELSE excluded.retention_ms END,
    status = NULL, headers = NULL, body = NULL, omitted = NULL, stored_at = NULL, trailers = NULL, response = NULL, version = 3
  WHERE (r.expiry IS NOT NULL AND r.expiry <= excluded.created) OR COALESCE(r.state = 1 AND r.token = excluded.token, false)
     OR (r.state = 1 AND r.lease_end <= excluded.created AND r.fingerprint = excluded.fingerprint AND NOT $9::boolean)
  RETURNING r.fingerprint, r.recipe, r.lease_end, r.takeover
)
SELECT true, v.now, up.fingerprint, up.recipe, up.lease_end, up.takeover, NULL::smallint, NULL::bytea,
  NULL::timestamptz, NULL::smallint, NULL::bytea, NULL::bytea, NULL::boolean, NULL::timestamptz, NULL::bytea,
  NULL::bytea, NULL::smallint, false
FROM up, v
UNION ALL
SELECT false, v.now, cur.fingerprint, cur.recipe, cur.lease_end, cur.takeover, cur.state, cur.token,
  cur.expiry, cur.status, cur.headers, cur.body, cur.omitted, cur.stored_at, cur.trailers,
  cur.response, cur.version, cur.claimable
FROM cur, v WHERE NOT EXISTS (SELECT 1 FROM up);
