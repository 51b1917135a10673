-- The schema version (0: none recorded) and whether the records table
-- exists ($1 the records table, quoted): tables without a version are those
-- of a build from before versions, which migration 1 adopts; a version
-- without the records table describes tables since dropped, which the
-- migrations make again.
SELECT COALESCE(max(version), 0), to_regclass($1) IS NOT NULL FROM "idemgate_records_schema";
