-- Closing, canceling or terminating a run deletes its open activity tasks by
-- run_id, and Describe lists them the same way. Without this index each of
-- those statements scanned the whole activity task table, dead rows included.
CREATE INDEX durable_activity_tasks_run ON durable_activity_tasks (run_id, seq);
