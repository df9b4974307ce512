-- durable:oldest-engine 1
--
-- What a rolling deploy needs to know, as in the Postgres store's migration
-- 0009: the oldest schema version an engine may be built for and still run
-- once a migration is applied, and the engines running. Only additions.
ALTER TABLE durable_schema_migrations ADD COLUMN oldest_engine INTEGER;

CREATE TABLE durable_engines (
    worker_id      TEXT    PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    build          TEXT    NOT NULL,
    host           TEXT    NOT NULL,
    pid            INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    seen_at        INTEGER NOT NULL
);
