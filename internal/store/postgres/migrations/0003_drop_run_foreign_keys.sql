-- A foreign key from a run's events, tasks and timers to the run costs a
-- trigger and a lookup of the run for every row inserted: 7% of Postgres's
-- CPU in the W1 benchmark (docs/performance.md, history, 2026-11-30 at f988938). Every statement that
-- inserts such a row takes the run from its own insert or locked update of
-- the run row, so none can be an orphan, and the engine never deletes runs.
-- To delete a run by hand, delete its rows from durable_events,
-- durable_workflow_tasks, durable_activity_tasks and durable_timers too.
ALTER TABLE durable_events DROP CONSTRAINT durable_events_run_id_fkey;
ALTER TABLE durable_workflow_tasks DROP CONSTRAINT durable_workflow_tasks_run_id_fkey;
ALTER TABLE durable_activity_tasks DROP CONSTRAINT durable_activity_tasks_run_id_fkey;
ALTER TABLE durable_timers DROP CONSTRAINT durable_timers_run_id_fkey;
