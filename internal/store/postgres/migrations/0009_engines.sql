-- durable:oldest-engine 8
--
-- What a rolling deploy needs to know. Each migration from this one on
-- records the oldest schema version an engine may be built for and still
-- run once it is applied (its file's durable:oldest-engine line), so an
-- engine started against a newer schema can tell whether it may run; and
-- running engines record themselves, so `durable migrate` can refuse a
-- migration that would break engines still running. Only additions: the
-- engines of schema version 8 run on beside it.
ALTER TABLE durable_schema_migrations ADD COLUMN oldest_engine integer;

CREATE TABLE durable_engines (
    worker_id      text        PRIMARY KEY,
    schema_version integer     NOT NULL,
    build          text        NOT NULL,
    host           text        NOT NULL,
    pid            integer     NOT NULL,
    started_at     timestamptz NOT NULL,
    seen_at        timestamptz NOT NULL
);
