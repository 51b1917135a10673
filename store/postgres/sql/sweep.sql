-- Sweep. $1 now, $2 batch size. SKIP LOCKED keeps instances from waiting
-- on each other or on a claim in flight; the outer expiry <= now re-checks
-- a row that changed meanwhile.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($1::timestamptz, clock_timestamp())) AS now)
DELETE FROM "idemgate_records" r USING n
WHERE r.ctid = ANY (ARRAY(SELECT s.ctid FROM "idemgate_records" s WHERE s.expiry <= (SELECT now FROM n)
                          LIMIT $2 FOR UPDATE OF s SKIP LOCKED))
  AND r.expiry <= n.now;
