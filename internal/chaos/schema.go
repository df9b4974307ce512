package chaos

// schemaSQL adds the rig's tables to a migrated database: the driver's
// records (the workflows it started, the signals it sent and how each
// call ended, the runs it terminated), the ledger of activity executions,
// the effects applied through the exactly-once helper, and tables that
// triggers fill with what the checker needs and the engine does not keep.
//
// The triggers record every write to the task tables (who held the row
// before, who holds it after, which session wrote, in which transaction,
// by the database clock) and the database's time at each timer's start and
// fire. A session is named by its application_name: each worker's
// connections carry its worker ID, the driver's "chaos-driver". The
// transaction ID is kept as the 32-bit xid a row's xmin shows, so that the
// checker can join the log with the events the same transaction appended.
const schemaSQL = `
CREATE TABLE chaos_workflows (
    workflow_id text        PRIMARY KEY,
    kind        text        NOT NULL,
    input       jsonb       NOT NULL,
    -- terminated is set when the driver terminated the run on purpose.
    terminated  boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_signals (
    workflow_id text        NOT NULL,
    idx         integer     NOT NULL,
    -- outcome is how the driver's Signal call ended: accepted (nil),
    -- closed (ErrRunClosed), or ambiguous (an error, then a retry that
    -- found the run closed).
    outcome     text        NOT NULL CHECK (outcome IN ('accepted', 'closed', 'ambiguous')),
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_ledger (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL,
    idempotency_key text        NOT NULL,
    run_id          text        NOT NULL,
    workflow_id     text        NOT NULL,
    attempt         integer     NOT NULL,
    pid             integer     NOT NULL,
    gen             integer     NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX chaos_ledger_key ON chaos_ledger (idempotency_key, created_at);
CREATE TABLE chaos_effects (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL,
    pid             integer     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_timer_fires (
    run_id   uuid        NOT NULL,
    event_id bigint      NOT NULL,
    seq      bigint      NOT NULL,
    fired_at timestamptz NOT NULL,
    writer   text        NOT NULL,
    xid      bigint      NOT NULL
);
CREATE TABLE chaos_timer_starts (
    run_id     uuid        NOT NULL,
    seq        bigint      NOT NULL,
    fire_at    timestamptz NOT NULL,
    started_at timestamptz NOT NULL,
    writer     text        NOT NULL
);
CREATE TABLE chaos_act_log (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- op: insert, claim (the attempt went up), release (the claim was
    -- given back or the attempt failed), heartbeat (the lease was
    -- extended), delete (an outcome, or the run closed), other.
    op               text        NOT NULL,
    task_id          bigint      NOT NULL,
    run_id           uuid,
    seq              bigint,
    idempotency_key  text        NOT NULL,
    attempt          integer     NOT NULL,
    old_attempt      integer,
    holder           text,
    old_holder       text,
    old_locked_until timestamptz,
    old_run_after    timestamptz,
    heartbeat        jsonb,
    writer           text        NOT NULL,
    xid              bigint      NOT NULL,
    at               timestamptz NOT NULL
);
CREATE TABLE chaos_wt_log (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- op: insert, claim (a new token and a holder), release (the holder
    -- gave it back: a commit with more to do, a failure, a shutdown),
    -- delete (a commit, a close), other.
    op               text        NOT NULL,
    run_id           uuid        NOT NULL,
    token            bigint,
    old_token        bigint,
    holder           text,
    old_holder       text,
    old_locked_until timestamptz,
    old_run_after    timestamptz,
    writer           text        NOT NULL,
    xid              bigint      NOT NULL,
    at               timestamptz NOT NULL
);
CREATE INDEX chaos_act_log_key ON chaos_act_log (idempotency_key);
CREATE FUNCTION chaos_log_act() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_act_log (op, task_id, run_id, seq, idempotency_key, attempt, holder, writer, xid, at)
        VALUES ('insert', NEW.id, NEW.run_id, NEW.seq, NEW.idempotency_key, NEW.attempt, NEW.locked_by,
                current_setting('application_name'), txid_current() % 4294967296, clock_timestamp());
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        INSERT INTO chaos_act_log (op, task_id, run_id, seq, idempotency_key, attempt, old_attempt, old_holder,
                                   old_locked_until, old_run_after, writer, xid, at)
        VALUES ('delete', OLD.id, OLD.run_id, OLD.seq, OLD.idempotency_key, OLD.attempt, OLD.attempt, OLD.locked_by,
                OLD.locked_until, OLD.run_after, current_setting('application_name'), txid_current() % 4294967296, clock_timestamp());
        RETURN NULL;
    END IF;
    kind := CASE
        WHEN NEW.attempt <> OLD.attempt THEN 'claim'
        WHEN NEW.locked_by IS NULL AND OLD.locked_by IS NOT NULL THEN 'release'
        WHEN NEW.heartbeat IS DISTINCT FROM OLD.heartbeat OR NEW.locked_until IS DISTINCT FROM OLD.locked_until THEN 'heartbeat'
        ELSE 'other' END;
    INSERT INTO chaos_act_log (op, task_id, run_id, seq, idempotency_key, attempt, old_attempt, holder, old_holder,
                               old_locked_until, old_run_after, heartbeat, writer, xid, at)
    VALUES (kind, NEW.id, NEW.run_id, NEW.seq, NEW.idempotency_key, NEW.attempt, OLD.attempt, NEW.locked_by, OLD.locked_by,
            OLD.locked_until, OLD.run_after, CASE WHEN kind = 'heartbeat' THEN NEW.heartbeat END,
            current_setting('application_name'), txid_current() % 4294967296, clock_timestamp());
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_log_act AFTER INSERT OR UPDATE OR DELETE ON durable_activity_tasks
    FOR EACH ROW EXECUTE FUNCTION chaos_log_act();
CREATE FUNCTION chaos_log_wt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_wt_log (op, run_id, token, holder, writer, xid, at)
        VALUES ('insert', NEW.run_id, NEW.token, NEW.locked_by, current_setting('application_name'),
                txid_current() % 4294967296, clock_timestamp());
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        INSERT INTO chaos_wt_log (op, run_id, old_token, old_holder, old_locked_until, old_run_after, writer, xid, at)
        VALUES ('delete', OLD.run_id, OLD.token, OLD.locked_by, OLD.locked_until, OLD.run_after,
                current_setting('application_name'), txid_current() % 4294967296, clock_timestamp());
        RETURN NULL;
    END IF;
    INSERT INTO chaos_wt_log (op, run_id, token, old_token, holder, old_holder, old_locked_until, old_run_after, writer, xid, at)
    VALUES (CASE
                WHEN NEW.locked_by IS NOT NULL AND NEW.token IS DISTINCT FROM OLD.token THEN 'claim'
                WHEN NEW.locked_by IS NULL AND OLD.locked_by IS NOT NULL THEN 'release'
                ELSE 'other' END,
            NEW.run_id, NEW.token, OLD.token, NEW.locked_by, OLD.locked_by, OLD.locked_until, OLD.run_after,
            current_setting('application_name'), txid_current() % 4294967296, clock_timestamp());
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_log_wt AFTER INSERT OR UPDATE OR DELETE ON durable_workflow_tasks
    FOR EACH ROW EXECUTE FUNCTION chaos_log_wt();
CREATE FUNCTION chaos_note_timer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_timer_fires VALUES (NEW.run_id, NEW.event_id, (NEW.attributes->>'seq')::bigint, clock_timestamp(),
        current_setting('application_name'), txid_current() % 4294967296);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_note_timer AFTER INSERT ON durable_events
    FOR EACH ROW WHEN (NEW.type = 'timer_fired') EXECUTE FUNCTION chaos_note_timer();
CREATE FUNCTION chaos_note_timer_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_timer_starts VALUES (NEW.run_id, NEW.seq, NEW.fire_at, clock_timestamp(), current_setting('application_name'));
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_note_timer_start AFTER INSERT ON durable_timers
    FOR EACH ROW EXECUTE FUNCTION chaos_note_timer_start();
`
