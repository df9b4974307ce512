-- An activity task of a run is named by its run and sequence number (its
-- idempotency key is "<run>:<seq>"), and the index on (run_id, seq) that
-- closes, cancels and Describe use already holds that name: made unique,
-- it keeps a run's activity from being queued twice. The unique index on
-- idempotency_key is then needed only for jobs (no run), which name
-- themselves by their key. Every activity task inserted costs one index
-- entry less (docs/performance.md, history, 2026-12-01 at 9212902).
CREATE UNIQUE INDEX durable_activity_tasks_run_seq ON durable_activity_tasks (run_id, seq);
DROP INDEX durable_activity_tasks_run;
ALTER INDEX durable_activity_tasks_run_seq RENAME TO durable_activity_tasks_run;
CREATE UNIQUE INDEX durable_activity_tasks_job_key ON durable_activity_tasks (idempotency_key) WHERE run_id IS NULL;
ALTER TABLE durable_activity_tasks DROP CONSTRAINT durable_activity_tasks_idempotency_key_key;
