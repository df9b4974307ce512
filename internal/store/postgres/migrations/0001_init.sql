-- Runs, their append-only histories, ready work, timers and dead letters.

CREATE TABLE durable_runs (
    run_id             uuid        PRIMARY KEY,
    workflow_id        text        NOT NULL,
    workflow_type      text        NOT NULL,
    queue              text        NOT NULL,
    status             text        NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'canceled', 'terminated', 'continued_as_new')),
    input              jsonb       NOT NULL,
    result             jsonb,
    failure            jsonb,
    next_event_id      bigint      NOT NULL DEFAULT 1,
    processed_event_id bigint      NOT NULL DEFAULT 0,
    -- trace_context is the W3C traceparent of the span that started the
    -- run: the parent of every later span, so a run is one trace.
    trace_context      text,
    -- A child workflow's parent, the parent's command for it, and what
    -- happens to it when the parent closes: terminate, cancel or abandon.
    parent_run_id       uuid,
    parent_seq          bigint,
    parent_close_policy text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    closed_at          timestamptz
);

-- A workflow ID names at most one open run.
CREATE UNIQUE INDEX durable_runs_open_workflow_id ON durable_runs (workflow_id) WHERE status = 'running';
CREATE INDEX durable_runs_workflow_id ON durable_runs (workflow_id, created_at);
CREATE INDEX durable_runs_status ON durable_runs (status, created_at);
CREATE INDEX durable_runs_open_children ON durable_runs (parent_run_id) WHERE status = 'running' AND parent_run_id IS NOT NULL;

CREATE TABLE durable_events (
    run_id     uuid        NOT NULL REFERENCES durable_runs (run_id) ON DELETE CASCADE,
    event_id   bigint      NOT NULL,
    type       text        NOT NULL,
    attributes jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, event_id)
);

-- One row per run that has work for a workflow worker. A claim sets locked_by
-- and locked_until and raises token; every write made on the strength of the
-- claim presents the token. A claim also moves run_after to locked_until, so
-- "run_after <= now" alone means ready: never claimed, released, or its lease
-- ran out. The activity tasks table works the same way.
-- Claim tokens of workflow tasks come from one sequence, so a token is
-- never reused, not even by a later task row of the same run.
CREATE SEQUENCE durable_task_token;

CREATE TABLE durable_workflow_tasks (
    run_id       uuid        PRIMARY KEY REFERENCES durable_runs (run_id) ON DELETE CASCADE,
    queue        text        NOT NULL,
    run_after    timestamptz NOT NULL,
    locked_by    text,
    locked_until timestamptz,
    token        bigint      NOT NULL DEFAULT 0,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text
);

CREATE INDEX durable_workflow_tasks_ready ON durable_workflow_tasks (queue, run_after);

CREATE TABLE durable_activity_tasks (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          uuid        REFERENCES durable_runs (run_id) ON DELETE CASCADE,
    seq             bigint      NOT NULL DEFAULT 0,
    activity        text        NOT NULL,
    queue           text        NOT NULL,
    input           jsonb       NOT NULL,
    idempotency_key text        NOT NULL UNIQUE,
    options         jsonb,
    attempt         integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 0,
    -- rate_limited counts retries the other side asked for; they do not
    -- spend max_attempts.
    rate_limited    integer     NOT NULL DEFAULT 0,
    -- lease_ms is how long one claim holds: the activity's start-to-close timeout.
    lease_ms        bigint      NOT NULL,
    run_after       timestamptz NOT NULL,
    locked_by       text,
    locked_until    timestamptz,
    last_error      text,
    last_error_class text,
    heartbeat       jsonb,
    first_failed_at timestamptz,
    -- created_at is when the activity was scheduled (or the job enqueued):
    -- the start of its schedule-to-close timeout.
    created_at      timestamptz NOT NULL
);

CREATE INDEX durable_activity_tasks_ready ON durable_activity_tasks (queue, run_after);

CREATE TABLE durable_timers (
    run_id  uuid        NOT NULL REFERENCES durable_runs (run_id) ON DELETE CASCADE,
    seq     bigint      NOT NULL,
    queue   text        NOT NULL,
    fire_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE INDEX durable_timers_fire_at ON durable_timers (fire_at);

CREATE TABLE durable_dead_letters (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL CHECK (kind IN ('job', 'workflow')),
    type             text        NOT NULL,
    queue            text        NOT NULL,
    payload          jsonb       NOT NULL,
    idempotency_key  text,
    run_id           uuid,
    workflow_id      text,
    attempts         integer     NOT NULL,
    last_error       text        NOT NULL,
    error_class      text,
    -- options are a job's activity options, for its redrive.
    options          jsonb,
    first_failed_at  timestamptz NOT NULL,
    dead_lettered_at timestamptz NOT NULL,
    redriven_at      timestamptz,
    -- redrive_run_id is the run a redriven workflow continues in.
    redrive_run_id   uuid
);

CREATE INDEX durable_dead_letters_pending ON durable_dead_letters (type, dead_lettered_at) WHERE redriven_at IS NULL;

-- Effects applied exactly once: engine.ExactlyOnce records an activity's
-- idempotency key (and its result) in the transaction that applies the effect.
CREATE TABLE durable_effects (
    idempotency_key text        PRIMARY KEY,
    result          jsonb,
    created_at      timestamptz NOT NULL
);
