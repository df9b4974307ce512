-- Activities with a ScheduleToStartTimeout that no attempt has claimed yet
-- (attempt 0), by when they were scheduled: the engines look them up every
-- PollInterval to fail those past their timeout (UnstartedActivities). The
-- index holds only such tasks, so it stays small and costs nothing to the
-- activities without the option. IF NOT EXISTS: on a large table, build it
-- first with CREATE INDEX CONCURRENTLY and this name (docs/operations.md,
-- Schema), and the migration finds it.
CREATE INDEX IF NOT EXISTS durable_activity_tasks_unstarted ON durable_activity_tasks (created_at)
    WHERE attempt = 0 AND options ? 'ScheduleToStartTimeout';
