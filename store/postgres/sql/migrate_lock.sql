-- Serializes migrations between replicas starting at once and `idemgate
-- migrate`: $1 is 7594876015281861733, the ASCII bytes of "idemgate". Held
-- until the migration's transaction ends.
SELECT pg_advisory_xact_lock($1);
