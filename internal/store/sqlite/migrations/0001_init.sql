-- Runs, their append-only histories, ready work, timers and dead letters:
-- the schema of the Postgres store (store/postgres/migrations), as it stands
-- after its migrations, in SQLite's terms.
--
-- Times are INTEGER microseconds since the Unix epoch, UTC: what Postgres's
-- timestamptz keeps, compared exactly. JSON is TEXT, checked with
-- json_valid as jsonb is checked (a refused value is store.ErrUnstorable).
-- Run IDs are TEXT (canonical UUIDs). There are no foreign keys, as in
-- Postgres (its migration 0003): every statement that inserts a row of a run
-- reads or writes the run in the same transaction.

CREATE TABLE durable_runs (
    run_id              TEXT    PRIMARY KEY,
    workflow_id         TEXT    NOT NULL,
    workflow_type       TEXT    NOT NULL,
    queue               TEXT    NOT NULL,
    status              TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'canceled', 'terminated', 'continued_as_new')),
    input               TEXT    NOT NULL CHECK (json_valid(input)),
    result              TEXT    CHECK (json_valid(result)),
    failure             TEXT    CHECK (json_valid(failure)),
    next_event_id       INTEGER NOT NULL DEFAULT 1,
    processed_event_id  INTEGER NOT NULL DEFAULT 0,
    -- trace_context is the W3C traceparent of the span that started the
    -- run: the parent of every later span, so a run is one trace.
    trace_context       TEXT,
    -- A child workflow's parent, the parent's command for it, and what
    -- happens to it when the parent closes: terminate, cancel or abandon.
    parent_run_id       TEXT,
    parent_seq          INTEGER,
    parent_close_policy TEXT,
    -- waiter: who may wait for the run's close (store.Run.Waiter). NULL is
    -- anyone, an engine's ID that engine, '*' engines besides its starter.
    waiter              TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    closed_at           INTEGER
);

-- A workflow ID names at most one open run.
CREATE UNIQUE INDEX durable_runs_open_workflow_id ON durable_runs (workflow_id) WHERE status = 'running';
CREATE INDEX durable_runs_workflow_id ON durable_runs (workflow_id, created_at);
CREATE INDEX durable_runs_status ON durable_runs (status, created_at);
CREATE INDEX durable_runs_created ON durable_runs (created_at);
CREATE INDEX durable_runs_open_children ON durable_runs (parent_run_id) WHERE status = 'running' AND parent_run_id IS NOT NULL;

CREATE TABLE durable_events (
    run_id     TEXT    NOT NULL,
    event_id   INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    attributes TEXT    NOT NULL CHECK (json_valid(attributes)),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, event_id)
) WITHOUT ROWID;

-- ActivityStats reads the activity outcomes of its window, newest first.
CREATE INDEX durable_events_activity_ends ON durable_events (created_at)
    WHERE type IN ('activity_completed', 'activity_failed');

-- Claim tokens of workflow tasks come from this one counter, so a token is
-- never reused, not even by a later task row of the same run (Postgres's
-- sequence durable_task_token).
CREATE TABLE durable_task_token (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    value INTEGER NOT NULL
);
INSERT INTO durable_task_token (one, value) VALUES (1, 0);

-- One row per run that has work for a workflow worker. A claim sets locked_by
-- and locked_until and raises token; every write made on the strength of the
-- claim presents the token. A claim also moves run_after to locked_until, so
-- "run_after <= now" alone means ready: never claimed, released, or its lease
-- ran out. The activity tasks table works the same way.
CREATE TABLE durable_workflow_tasks (
    run_id       TEXT    PRIMARY KEY,
    queue        TEXT    NOT NULL,
    run_after    INTEGER NOT NULL,
    locked_by    TEXT,
    locked_until INTEGER,
    token        INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT
);

CREATE INDEX durable_workflow_tasks_ready ON durable_workflow_tasks (queue, run_after);
CREATE INDEX durable_workflow_tasks_locked_by ON durable_workflow_tasks (locked_by) WHERE locked_by IS NOT NULL;

-- AUTOINCREMENT: an ID is never given to a second task. With a reused ID, a
-- late outcome of a deleted task (its ID and attempt) would fence as a claim
-- of the new one.
CREATE TABLE durable_activity_tasks (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    -- run_id is NULL for a standalone job.
    run_id           TEXT,
    seq              INTEGER NOT NULL DEFAULT 0,
    activity         TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    input            TEXT    NOT NULL CHECK (json_valid(input)),
    idempotency_key  TEXT    NOT NULL,
    options          TEXT    CHECK (json_valid(options)),
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 0,
    -- rate_limited counts retries the other side asked for; they do not
    -- spend max_attempts.
    rate_limited     INTEGER NOT NULL DEFAULT 0,
    -- lease_ms is how long one claim holds: the activity's start-to-close timeout.
    lease_ms         INTEGER NOT NULL,
    run_after        INTEGER NOT NULL,
    locked_by        TEXT,
    locked_until     INTEGER,
    last_error       TEXT,
    last_error_class TEXT,
    heartbeat        TEXT    CHECK (json_valid(heartbeat)),
    first_failed_at  INTEGER,
    -- created_at is when the activity was scheduled (or the job enqueued):
    -- the start of its schedule-to-close timeout.
    created_at       INTEGER NOT NULL,
    -- canceled: the workflow canceled the activity with WaitForCancellation
    -- while an attempt ran; heartbeats and retries of it are refused.
    canceled         INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX durable_activity_tasks_ready ON durable_activity_tasks (queue, run_after);
-- A run's activity is queued once; NULLs are distinct, so jobs do not meet here.
CREATE UNIQUE INDEX durable_activity_tasks_run ON durable_activity_tasks (run_id, seq);
-- A job names itself by its idempotency key, unique among pending jobs.
CREATE UNIQUE INDEX durable_activity_tasks_job_key ON durable_activity_tasks (idempotency_key) WHERE run_id IS NULL;
CREATE INDEX durable_activity_tasks_locked_by ON durable_activity_tasks (locked_by) WHERE locked_by IS NOT NULL;
-- Activities with a ScheduleToStartTimeout that no attempt has claimed yet
-- (UnstartedActivities).
CREATE INDEX durable_activity_tasks_unstarted ON durable_activity_tasks (created_at)
    WHERE attempt = 0 AND json_type(options, '$.ScheduleToStartTimeout') IS NOT NULL;

CREATE TABLE durable_timers (
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    queue   TEXT    NOT NULL,
    fire_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE INDEX durable_timers_fire_at ON durable_timers (fire_at);

CREATE TABLE durable_dead_letters (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL CHECK (kind IN ('job', 'workflow')),
    type             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    idempotency_key  TEXT,
    run_id           TEXT,
    workflow_id      TEXT,
    attempts         INTEGER NOT NULL,
    last_error       TEXT    NOT NULL,
    error_class      TEXT,
    -- options are a job's activity options, for its redrive.
    options          TEXT    CHECK (json_valid(options)),
    first_failed_at  INTEGER NOT NULL,
    dead_lettered_at INTEGER NOT NULL,
    redriven_at      INTEGER,
    -- redrive_run_id is the run a redriven workflow continues in.
    redrive_run_id   TEXT
);

CREATE INDEX durable_dead_letters_pending ON durable_dead_letters (type, dead_lettered_at) WHERE redriven_at IS NULL;
-- A redriven run's history begins with copies of the failed run's events,
-- which ActivityStats leaves out: it finds a copy's dead letter by the run
-- it was redriven to.
CREATE INDEX durable_dead_letters_redrive ON durable_dead_letters (redrive_run_id) WHERE redrive_run_id IS NOT NULL;
