-- Index sweep. $1 now, $2 batch size. Run after the records' sweep, the
-- same way.
WITH n AS MATERIALIZED (SELECT date_trunc('milliseconds', COALESCE($1::timestamptz, clock_timestamp())) AS now)
DELETE FROM "idemgate_records_index" i USING n
WHERE i.ctid = ANY (ARRAY(SELECT s.ctid FROM "idemgate_records_index" s WHERE s.expiry <= (SELECT now FROM n)
                          LIMIT $2 FOR UPDATE OF s SKIP LOCKED))
  AND i.expiry <= n.now;
