-- An activity canceled by its workflow with WaitForCancellation keeps its
-- task, marked canceled, while its running attempt finishes: heartbeats and
-- retries of it are refused, its outcome is recorded as usual.
ALTER TABLE durable_activity_tasks ADD COLUMN canceled boolean NOT NULL DEFAULT false;
