package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// claimActivityTasksSQL claims, with oldest_first, one of the queue's
// oldest ready tasks; then the preferred tasks (pref_run, pref_seq) that
// are ready and not locked (never tried ones up to pref_early before their
// run_after); then, up to the limit, the queue's oldest ready ones. It skips
// its own locks by ID: SKIP LOCKED does not skip rows the statement itself
// has locked. The preferred tasks are looked up one key at a time, by run
// and seq, in a LATERAL subquery (its LIMIT keeps the planner from turning
// it into a join): as a join, a plan made while the table was nearly empty
// walked the whole run index and matched every entry against the keys, 42
// ms a claim at 20,000 tasks, for as long as the connection kept the plan.
// Their readiness is written so that no index can serve it: the ready index
// would otherwise be walked whole and joined to the keys (0.79 ms and 436
// buffers a claim in W1, against 0.13 ms and 96 without preferences).
// A claimed task's run is read once, in a LATERAL subquery that keeps the
// lookup on the runs' primary key.
const claimActivityTasksSQL = `
WITH first AS (
    SELECT id FROM durable_activity_tasks
    WHERE queue = @queue AND run_after <= @now AND (@any_type OR activity = ANY(@types::text[]))
    ORDER BY run_after
    LIMIT CASE WHEN @oldest_first::bool THEN 1 ELSE 0 END
    FOR UPDATE SKIP LOCKED
), mine AS (
    SELECT t.id FROM unnest(@pref_run::uuid[], @pref_seq::bigint[]) AS k(run_id, seq)
    CROSS JOIN LATERAL (
        SELECT t.id FROM durable_activity_tasks t
        WHERE t.run_id = k.run_id AND t.seq = k.seq
            AND (t.queue = @queue AND (t.run_after <= @now OR t.attempt = 0 AND t.run_after <= @now + @pref_early::interval)) IS TRUE
            AND (@any_type OR t.activity = ANY(@types::text[]))
            AND t.id NOT IN (SELECT id FROM first)
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) t
    LIMIT @limit - (SELECT count(*) FROM first)
), oldest AS (
    SELECT id FROM durable_activity_tasks
    WHERE queue = @queue AND run_after <= @now AND (@any_type OR activity = ANY(@types::text[]))
        AND id NOT IN (SELECT id FROM first) AND id NOT IN (SELECT id FROM mine)
    ORDER BY run_after
    LIMIT @limit - (SELECT count(*) FROM first) - (SELECT count(*) FROM mine)
    FOR UPDATE SKIP LOCKED
), c AS (
    SELECT id FROM first UNION ALL SELECT id FROM mine UNION ALL SELECT id FROM oldest
), t AS (
    UPDATE durable_activity_tasks t
    SET attempt = t.attempt + 1, locked_by = @worker,
        locked_until = @now + t.lease_ms * interval '1 millisecond',
        run_after = @now + t.lease_ms * interval '1 millisecond'
    WHERE t.id = ANY(ARRAY(SELECT id FROM c))
    RETURNING t.*
)
SELECT t.id, coalesce(t.run_id::text, ''), coalesce(r.workflow_id, ''), coalesce(r.queue, ''), coalesce(r.trace_context, ''),
    t.seq, t.activity, t.queue, t.input, t.idempotency_key, t.attempt, t.max_attempts, t.rate_limited,
    t.options, t.locked_until, t.created_at, coalesce(t.last_error, ''), t.heartbeat
FROM t LEFT JOIN LATERAL (
    SELECT r.workflow_id, r.queue, r.trace_context FROM durable_runs r WHERE r.run_id = t.run_id LIMIT 1
) r ON true`

// ClaimActivityTasks implements store.Store.
func (s *Store) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	tasks, err := queryIndexed(ctx, s, claimActivityTasksSQL, claimActivityArgs(in), scanActivityTask)
	if err != nil {
		return nil, fmt.Errorf("claim activity tasks on queue %q: %w", in.Queue, err)
	}
	return tasks, nil
}

// claimActivityArgs are claimActivityTasksSQL's arguments for in.
func claimActivityArgs(in store.ClaimParams) namedArgs {
	prefRun, prefSeq := make([]string, len(in.Prefer)), make([]int64, len(in.Prefer))
	for i, k := range in.Prefer {
		prefRun[i], prefSeq[i] = k.RunID, k.Seq
	}
	return namedArgs{
		"queue": in.Queue, "now": in.Now, "limit": in.Limit, "worker": in.WorkerID,
		"any_type": in.Types == nil, "types": arrayArg(in.Types), "pref_run": uuidArray(prefRun), "pref_seq": prefSeq,
		"pref_early": in.PreferEarly, "oldest_first": in.OldestFirst,
	}
}

// scanActivityTask reads a row of claimActivityTasksSQL. Its jsonb columns
// are scanned as bytes: into a json.RawMessage, pgx would run json.Unmarshal
// on each, to check and copy what Postgres already checked.
func scanActivityTask(row pgx.CollectableRow) (store.ActivityTask, error) {
	var t store.ActivityTask
	err := row.Scan(&t.ID, &t.RunID, &t.WorkflowID, &t.WorkflowQueue, &t.TraceContext, &t.Seq, &t.Activity, &t.Queue, (*[]byte)(&t.Input), &t.IdempotencyKey,
		&t.Attempt, &t.MaxAttempts, &t.RateLimited, (*[]byte)(&t.Options), &t.LockedUntil, &t.ScheduledAt, &t.LastError, (*[]byte)(&t.Heartbeat))
	return t, err
}

// resolveTailSQL is what both outcome statements do after deleting the
// task: append the event to the run, and make (or claim) its workflow task.
const resolveTailSQL = `
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + 1, updated_at = ` + eventTime + `
    FROM task
    WHERE r.run_id = (SELECT run_id FROM task) AND ` + runOpen + `
    RETURNING r.run_id, r.queue, r.workflow_id, r.workflow_type, r.processed_event_id, r.next_event_id - 1 AS event_id,
        r.trace_context, r.parent_run_id, r.updated_at AS at
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id, @type, @attrs, at FROM run
), wt AS (
    -- With claim_as the new workflow task is claimed for the completing
    -- worker, which runs it without a claim of its own.
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after, locked_by, locked_until, token)
    SELECT run_id, queue,
        CASE WHEN @claim_as::text = '' THEN @now ELSE @until END,
        nullif(@claim_as::text, ''),
        CASE WHEN @claim_as::text = '' THEN NULL ELSE @until::timestamptz END,
        CASE WHEN @claim_as::text = '' THEN 0 ELSE nextval('durable_task_token') END
    FROM run
    ON CONFLICT (run_id) DO NOTHING
    RETURNING queue, locked_by IS NOT NULL AS claimed, token
)
SELECT (SELECT count(*) FROM task), wt.queue, coalesce(wt.claimed, false), coalesce(wt.token, 0),
    coalesce(run.run_id::text, ''), coalesce(run.workflow_id, ''), coalesce(run.workflow_type, ''), coalesce(run.processed_event_id, 0),
    coalesce(run.event_id, 0), coalesce(run.trace_context, ''), coalesce(run.parent_run_id::text, ''),
    coalesce(run.at, @now::timestamptz)
FROM (SELECT 1) one LEFT JOIN wt ON true LEFT JOIN run ON true`

// resolveActivitySQL deletes the task if the claim still holds, and appends
// the outcome to its run (run row first, then the workflow task: the lock
// order every writer follows).
const resolveActivitySQL = `
WITH task AS (
    DELETE FROM durable_activity_tasks
    WHERE id = @id AND attempt = @attempt AND (NOT @held::bool OR locked_by IS NOT NULL)
    RETURNING run_id, activity, queue, input, idempotency_key, options, first_failed_at
), dead AS (
    -- A standalone job that fails for good is kept as a dead letter.
    INSERT INTO durable_dead_letters (kind, type, queue, payload, idempotency_key, attempts, last_error,
        error_class, options, first_failed_at, dead_lettered_at)
    SELECT 'job', activity, queue, input, idempotency_key, @attempts, @error, @class, options,
        coalesce(first_failed_at, @now), @now
    FROM task
    WHERE run_id IS NULL AND @failed
` + resolveTailSQL

// completeActivitySQL is resolveActivitySQL for a completion: no dead
// letter can come of it, so that part is left out.
const completeActivitySQL = `
WITH task AS (
    DELETE FROM durable_activity_tasks
    WHERE id = @id AND attempt = @attempt AND (NOT @held::bool OR locked_by IS NOT NULL)
    RETURNING run_id
` + resolveTailSQL

// ResolveActivity implements store.Store.
func (s *Store) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	var ready store.Ready
	in.Event = store.EscapeEvent(in.Event) // as it is stored, for the hand-off too
	attrs, err := store.EncodeEvent(in.Event)
	if err != nil {
		return ready, fmt.Errorf("resolve activity task %d: %w", in.TaskID, err)
	}
	var (
		deleted int
		queue   *string
		claimed bool
		wt      store.WorkflowTask
		eventID int64
		at      time.Time // the event's time (eventTime)
	)
	args := namedArgs{
		"id": in.TaskID, "attempt": in.Attempt, "now": in.Now, "type": in.Event.EventType(), "attrs": string(attrs),
		"failed": false, "error": "", "class": "", "attempts": in.Attempt,
		"claim_as": in.ClaimAs, "until": in.Now.Add(in.Lease), "held": in.Held,
	}
	if f, ok := in.Event.(history.ActivityFailed); ok {
		args["failed"], args["error"], args["class"], args["attempts"] = true, f.Failure.Message, f.Failure.Class, f.Failure.Attempts
	}
	sql := resolveActivitySQL
	if _, ok := in.Event.(history.ActivityCompleted); ok {
		sql = completeActivitySQL
	}
	err = s.writeRow(ctx, in.RunID, sql, args, scanInto(&deleted, &queue, &claimed, &wt.Token, &wt.RunID, &wt.WorkflowID,
		&wt.WorkflowType, &wt.ProcessedEventID, &eventID, &wt.TraceContext, &wt.ParentRunID, &at))
	if err != nil {
		return ready, fmt.Errorf("resolve activity task %d: %w", in.TaskID, translate(err))
	}
	if deleted == 0 {
		return ready, store.ErrLeaseLost
	}
	switch {
	case queue != nil && claimed:
		wt.Queue, wt.LockedUntil = *queue, in.Now.Add(in.Lease)
		wt.Events = []history.Event{{ID: eventID, Time: at, Attributes: in.Event}}
		ready.WorkflowTasks = []store.WorkflowTask{wt}
	case queue != nil:
		ready.WorkflowQueues = []string{*queue}
	}
	return ready, nil
}

const retryActivitySQL = `
UPDATE durable_activity_tasks
SET locked_by = NULL, locked_until = NULL, run_after = @run_after, last_error = @error,
    last_error_class = @class, first_failed_at = coalesce(first_failed_at, @now),
    max_attempts = CASE WHEN @rate_limited AND max_attempts > 0 THEN max_attempts + 1 ELSE max_attempts END,
    rate_limited = rate_limited + CASE WHEN @rate_limited THEN 1 ELSE 0 END
WHERE id = @id AND attempt = @attempt AND NOT canceled`

// RetryActivity implements store.Store.
func (s *Store) RetryActivity(ctx context.Context, in store.RetryActivityParams) error {
	tag, err := s.exec(ctx, retryActivitySQL, namedArgs{
		"id": in.TaskID, "attempt": in.Attempt, "run_after": in.RunAfter, "error": store.EscapeText(in.Error), "now": in.Now,
		"rate_limited": in.RateLimited, "class": store.EscapeText(in.ErrorClass),
	})
	if err != nil {
		return fmt.Errorf("retry activity task %d: %w", in.TaskID, translate(err))
	}
	if tag.RowsAffected() == 0 {
		var canceled bool
		err := s.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM durable_activity_tasks WHERE id = $1 AND attempt = $2 AND canceled)`,
			scanInto(&canceled), in.TaskID, in.Attempt)
		switch {
		case err != nil:
			return fmt.Errorf("retry activity task %d: refused; look up why: %w", in.TaskID, translate(err))
		case canceled:
			return store.ErrActivityCanceled
		}
		return store.ErrLeaseLost
	}
	return nil
}

// releaseActivityTasksSQL gives back a worker's claims. The attempt number
// stays (it fences the released claim), so the budget grows by one instead.
const releaseActivityTasksSQL = `
WITH rel AS (
    UPDATE durable_activity_tasks
    SET locked_by = NULL, locked_until = NULL, run_after = @now,
        max_attempts = CASE WHEN max_attempts > 0 THEN max_attempts + 1 ELSE 0 END
    WHERE locked_by = @worker AND locked_until > @now
    RETURNING queue
)
SELECT count(pg_notify('durable', 'a:' || queue)) FROM (SELECT DISTINCT queue FROM rel) q`

// releaseActivityTaskSQL gives back one task, fenced by its attempt.
const releaseActivityTaskSQL = `
WITH rel AS (
    UPDATE durable_activity_tasks
    SET locked_by = NULL, locked_until = NULL, run_after = @now,
        max_attempts = CASE WHEN max_attempts > 0 THEN max_attempts + 1 ELSE 0 END
    WHERE id = @task AND attempt = @attempt AND locked_by = @worker AND locked_until > @now
    RETURNING queue
)
SELECT count(pg_notify('durable', 'a:' || queue)) FROM rel`

// ReleaseActivityTasks implements store.Store.
func (s *Store) ReleaseActivityTasks(ctx context.Context, in store.ReleaseParams) error {
	sql, args := releaseActivityTasksSQL, namedArgs{"worker": in.WorkerID, "now": in.Now}
	if in.TaskID != 0 {
		sql, args["task"], args["attempt"] = releaseActivityTaskSQL, in.TaskID, in.Attempt
	}
	var n int
	if err := s.db.QueryRow(ctx, sql, args).Scan(&n); err != nil {
		if in.TaskID != 0 {
			return fmt.Errorf("release activity task %d (attempt %d) of worker %s: %w", in.TaskID, in.Attempt, in.WorkerID, err)
		}
		return fmt.Errorf("release activity tasks of worker %s: %w", in.WorkerID, err)
	}
	return nil
}

// The next due task, by the ready index in order. Written as min(), a plan
// made on a nearly empty table read the queue's whole index (28 ms at a
// backlog of 24,000 tasks) instead of its first entry.
const (
	nextWorkflowDueSQL = `SELECT run_after FROM durable_workflow_tasks WHERE queue = $1 ORDER BY run_after LIMIT 1`
	nextActivityDueSQL = `SELECT run_after FROM durable_activity_tasks WHERE queue = $1 ORDER BY run_after LIMIT 1`
)

// NextDue implements store.Store.
func (s *Store) NextDue(ctx context.Context, kind, queue string) (time.Time, bool, error) {
	sql := nextActivityDueSQL
	if kind == "workflow" {
		sql = nextWorkflowDueSQL
	}
	var t time.Time
	switch err := s.queryRow(ctx, sql, scanInto(&t), queue); {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("next due %s task on queue %q: %w", kind, queue, err)
	}
	return t, true, nil
}

const heartbeatActivitySQL = `
UPDATE durable_activity_tasks
SET heartbeat = CASE WHEN @hand_off::text = '' THEN @details ELSE heartbeat END,
    locked_by = coalesce(nullif(@hand_off::text, ''), locked_by), locked_until = @until, run_after = @until
WHERE id = @id AND attempt = @attempt AND locked_by IS NOT NULL AND NOT canceled`

// HeartbeatActivity implements store.Store.
func (s *Store) HeartbeatActivity(ctx context.Context, in store.HeartbeatParams) error {
	if err := store.CheckPayload(in.Details); err != nil {
		return fmt.Errorf("heartbeat activity task %d: details: %w", in.TaskID, err)
	}
	tag, err := s.exec(ctx, heartbeatActivitySQL, namedArgs{
		"id": in.TaskID, "attempt": in.Attempt, "details": jsonArg(in.Details), "until": in.LockedUntil, "hand_off": in.HandOff,
	})
	if err != nil {
		return fmt.Errorf("heartbeat activity task %d: %w", in.TaskID, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return s.heartbeatRefused(ctx, in)
	}
	return nil
}

// heartbeatRefusedSQL tells, for an activity whose heartbeat found no claim
// to extend, whether its run gave up on it: it closed, or recorded the
// activity's cancellation, with no outcome of it in history.
const heartbeatRefusedSQL = `
SELECT EXISTS (
    SELECT 1 FROM durable_runs r
    WHERE r.run_id = @run_id
      AND (r.status <> 'running' OR EXISTS (
          SELECT 1 FROM durable_events e
          WHERE e.run_id = @run_id AND e.type = 'activity_canceled' AND (e.attributes->>'seq')::bigint = @seq))
      AND NOT EXISTS (
          SELECT 1 FROM durable_events e
          WHERE e.run_id = @run_id AND e.type IN ('activity_completed', 'activity_failed')
            AND (e.attributes->>'seq')::bigint = @seq))`

// heartbeatRefused tells why a heartbeat extended no claim:
// ErrActivityCanceled if the activity's run gave up on it, else
// ErrLeaseLost (another attempt took it or finished it).
func (s *Store) heartbeatRefused(ctx context.Context, in store.HeartbeatParams) error {
	if in.RunID == "" {
		return store.ErrLeaseLost
	}
	var canceled bool
	err := s.queryRow(ctx, heartbeatRefusedSQL, scanInto(&canceled), namedArgs{"run_id": in.RunID, "seq": in.Seq})
	switch {
	case err != nil:
		return fmt.Errorf("heartbeat activity task %d: refused; look up why: %w", in.TaskID, translate(err))
	case canceled:
		return store.ErrActivityCanceled
	}
	return store.ErrLeaseLost
}

const enqueueJobSQL = `
WITH ins AS (
    INSERT INTO durable_activity_tasks (activity, queue, input, idempotency_key, options, max_attempts, lease_ms, run_after, created_at)
    VALUES (@activity, @queue, @input, @key, @options, @max_attempts, @lease_ms, @run_after, @now)
    ON CONFLICT (idempotency_key) WHERE run_id IS NULL DO NOTHING
    RETURNING id, queue, run_after
)
SELECT id, count(CASE WHEN @notify AND run_after <= @now THEN pg_notify('durable', 'a:' || queue) END)
FROM ins GROUP BY id`

// EnqueueJob implements store.Store.
func (s *Store) EnqueueJob(ctx context.Context, in store.EnqueueJobParams) (int64, bool, error) {
	t := in.Task
	var id, notes int64
	err := s.queryRow(ctx, enqueueJobSQL, scanInto(&id, &notes), namedArgs{
		"activity": t.Activity, "queue": t.Queue, "input": jsonArg(t.Input), "key": t.IdempotencyKey,
		"options": jsonArg(t.Options), "max_attempts": t.MaxAttempts, "lease_ms": t.Lease.Milliseconds(),
		"run_after": t.RunAfter, "now": in.Now, "notify": in.Notify,
	})
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, fmt.Errorf("enqueue job %s: %w", t.Activity, err)
	}
	err = s.queryRow(ctx, `SELECT id FROM durable_activity_tasks WHERE idempotency_key = $1 AND run_id IS NULL`, scanInto(&id), t.IdempotencyKey)
	if errors.Is(err, pgx.ErrNoRows) {
		// The pending job finished between our insert and this read: its
		// key is free again, so try once more.
		return s.EnqueueJob(ctx, in)
	}
	if err != nil {
		return 0, false, fmt.Errorf("enqueue job %s: find the pending job with key %q: %w", t.Activity, t.IdempotencyKey, err)
	}
	return id, true, nil
}

// unstartedActivitiesSQL finds tasks never claimed whose schedule-to-start
// timeout (recorded in their options, in nanoseconds) has ended, by the
// partial index of such tasks (migration 0007).
const unstartedActivitiesSQL = `
SELECT t.id, coalesce(t.run_id::text, ''), coalesce(r.workflow_id, ''), coalesce(r.queue, ''), coalesce(r.trace_context, ''),
    t.seq, t.activity, t.queue, t.idempotency_key, t.max_attempts, t.options, t.created_at
FROM durable_activity_tasks t LEFT JOIN LATERAL (
    SELECT r.workflow_id, r.queue, r.trace_context FROM durable_runs r WHERE r.run_id = t.run_id LIMIT 1
) r ON true
WHERE t.attempt = 0 AND t.options ? 'ScheduleToStartTimeout'
    AND t.created_at + ((t.options->>'ScheduleToStartTimeout')::bigint / 1000) * interval '1 microsecond' <= @now
ORDER BY t.created_at
LIMIT @limit`

// UnstartedActivities implements store.Store.
func (s *Store) UnstartedActivities(ctx context.Context, now time.Time, limit int) ([]store.ActivityTask, error) {
	tasks, err := queryIndexed(ctx, s, unstartedActivitiesSQL, namedArgs{"now": now, "limit": limit}, scanUnstartedActivity)
	if err != nil {
		return nil, fmt.Errorf("list activities past their schedule-to-start timeout: %w", translate(err))
	}
	return tasks, nil
}

// scanUnstartedActivity reads a row of unstartedActivitiesSQL.
func scanUnstartedActivity(row pgx.CollectableRow) (store.ActivityTask, error) {
	var t store.ActivityTask
	err := row.Scan(&t.ID, &t.RunID, &t.WorkflowID, &t.WorkflowQueue, &t.TraceContext, &t.Seq, &t.Activity, &t.Queue,
		&t.IdempotencyKey, &t.MaxAttempts, (*[]byte)(&t.Options), &t.ScheduledAt)
	return t, err
}
