-- name: migrate_create_schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: migrate_create_ledger
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version    text PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: migrate_ledger_exists
SELECT to_regclass('{schema}.schema_migrations') IS NOT NULL;

-- name: migrate_list_applied
SELECT version, name, checksum, applied_at FROM {schema}.schema_migrations ORDER BY version;

-- name: migrate_record
INSERT INTO {schema}.schema_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: migrate_lock
SELECT pg_advisory_lock(hashtextextended($1, 0));

-- name: migrate_unlock
SELECT pg_advisory_unlock(hashtextextended($1, 0));
