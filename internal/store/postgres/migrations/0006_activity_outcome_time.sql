-- `durable stats` reads the activity outcomes of its window, newest first
-- (ActivityStats). This index holds those events only, by time, so that it
-- reads them and not every event of the table (before 2026-12-03 it did, and
-- at 200,000 runs without table statistics it took over 10 minutes). Each
-- activity outcome written costs one more index entry. IF NOT EXISTS: on a
-- large table, build it first with CREATE INDEX CONCURRENTLY and this name
-- (docs/operations.md, Schema), and the migration finds it.
CREATE INDEX IF NOT EXISTS durable_events_activity_ends ON durable_events (created_at)
    WHERE type IN ('activity_completed', 'activity_failed');

-- A redriven run's history begins with copies of the failed run's events,
-- which ActivityStats leaves out: it finds a copy's dead letter by the run
-- it was redriven to.
CREATE INDEX IF NOT EXISTS durable_dead_letters_redrive ON durable_dead_letters (redrive_run_id)
    WHERE redrive_run_id IS NOT NULL;
