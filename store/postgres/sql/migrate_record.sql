-- Records migration $1, file $2, as applied. A version recorded for tables
-- since dropped is recorded again.
INSERT INTO "idemgate_records_schema" (version, name) VALUES ($1, $2)
ON CONFLICT (version) DO UPDATE SET name = excluded.name, applied_at = excluded.applied_at;
