package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// The statements of an activity claim. Each picks task IDs; the claim then
// takes the picked tasks, in the write transaction that holds the write
// lock, so no other claim can take them too.
const (
	// oldestActivitiesSQL picks the queue's oldest ready tasks, leaving
	// out those picked already (@picked, a JSON array of IDs).
	oldestActivitiesSQL = `
SELECT id FROM durable_activity_tasks
WHERE queue = @queue AND run_after <= @now
  AND (@any_type OR activity IN (SELECT value FROM json_each(@types)))
  AND id NOT IN (SELECT value FROM json_each(@picked))
ORDER BY run_after, id
LIMIT @limit`
	// preferredActivitySQL picks one preferred task, if it is ready (one
	// never tried, up to @early before its run_after).
	preferredActivitySQL = `
SELECT id FROM durable_activity_tasks
WHERE run_id = @run_id AND seq = @seq AND queue = @queue
  AND (run_after <= @now OR (attempt = 0 AND run_after <= @now + @early))
  AND (@any_type OR activity IN (SELECT value FROM json_each(@types)))`
	// claimActivitySQL takes a task for a new attempt, for its lease.
	claimActivitySQL = `
UPDATE durable_activity_tasks
SET attempt = attempt + 1, locked_by = @worker, locked_until = @now + lease_ms * 1000, run_after = @now + lease_ms * 1000
WHERE id = @id`
	activityTaskSQL = `
SELECT t.id, coalesce(t.run_id, ''), coalesce(r.workflow_id, ''), coalesce(r.queue, ''), coalesce(r.trace_context, ''),
    t.seq, t.activity, t.queue, t.input, t.idempotency_key, t.attempt, t.max_attempts, t.rate_limited,
    t.options, coalesce(t.locked_until, 0), t.created_at, coalesce(t.last_error, ''), t.heartbeat
FROM durable_activity_tasks t LEFT JOIN durable_runs r ON r.run_id = t.run_id
WHERE t.id = @id`
)

// ClaimActivityTasks implements store.Store: with OldestFirst, one of the
// queue's oldest ready tasks; then the preferred tasks that are ready; then,
// up to the limit, the queue's oldest ready ones.
func (s *Store) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	if in.Limit <= 0 {
		return nil, nil
	}
	now := micros(in.Now)
	var tasks []store.ActivityTask
	err := s.write(ctx, func(tx *sql.Tx) error {
		anyType, types := sql.Named("any_type", in.Types == nil), sql.Named("types", jsonList(in.Types))
		var picked []int64
		oldest := func(limit int) error {
			ids, err := queryAll(ctx, tx, oldestActivitiesSQL, scanID, sql.Named("queue", in.Queue), sql.Named("now", now),
				anyType, types, sql.Named("picked", jsonList(picked)), sql.Named("limit", limit))
			picked = append(picked, ids...)
			return err
		}
		if in.OldestFirst {
			if err := oldest(1); err != nil {
				return err
			}
		}
		for _, k := range in.Prefer {
			if len(picked) >= in.Limit {
				break
			}
			var id int64
			err := tx.QueryRowContext(ctx, preferredActivitySQL, sql.Named("run_id", k.RunID), sql.Named("seq", k.Seq),
				sql.Named("queue", in.Queue), sql.Named("now", now), sql.Named("early", in.PreferEarly.Microseconds()),
				anyType, types).Scan(&id)
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return err
			case !slices.Contains(picked, id):
				picked = append(picked, id)
			}
		}
		if len(picked) < in.Limit {
			if err := oldest(in.Limit - len(picked)); err != nil {
				return err
			}
		}
		for _, id := range picked {
			if _, err := tx.ExecContext(ctx, claimActivitySQL, sql.Named("worker", in.WorkerID), sql.Named("now", now),
				sql.Named("id", id)); err != nil {
				return err
			}
			t, err := activityTask(ctx, tx, id)
			if err != nil {
				return err
			}
			tasks = append(tasks, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim activity tasks on queue %q: %w", in.Queue, err)
	}
	return tasks, nil
}

// scanID reads a row of one ID.
func scanID(rows *sql.Rows) (id int64, err error) {
	err = rows.Scan(&id)
	return id, err
}

// activityTask reads a claimed activity task.
func activityTask(ctx context.Context, q querier, id int64) (store.ActivityTask, error) {
	var (
		t                           store.ActivityTask
		input, options, heartbeat   []byte
		lockedUntil, created        int64
		attempt, maxAttempts, rated int64
	)
	err := q.QueryRowContext(ctx, activityTaskSQL, sql.Named("id", id)).Scan(&t.ID, &t.RunID, &t.WorkflowID, &t.WorkflowQueue,
		&t.TraceContext, &t.Seq, &t.Activity, &t.Queue, &input, &t.IdempotencyKey, &attempt, &maxAttempts, &rated,
		&options, &lockedUntil, &created, &t.LastError, &heartbeat)
	if err != nil {
		return t, fmt.Errorf("read activity task %d: %w", id, err)
	}
	t.Input, t.Options, t.Heartbeat = input, options, heartbeat
	t.Attempt, t.MaxAttempts, t.RateLimited = int(attempt), int(maxAttempts), int(rated)
	t.LockedUntil, t.ScheduledAt = fromMicros(lockedUntil), fromMicros(created)
	return t, nil
}

// The statements of an activity's outcome.
const (
	// resolvableSQL finds the task at the attempt whose outcome this is
	// (and, for an outcome from outside the attempt, only while the attempt
	// holds its claim).
	resolvableSQL = `
SELECT coalesce(run_id, ''), activity, queue, input, idempotency_key, options, first_failed_at
FROM durable_activity_tasks
WHERE id = @id AND attempt = @attempt AND (NOT @held OR locked_by IS NOT NULL)`
	// deadJobSQL keeps a standalone job that failed for good as a dead
	// letter.
	deadJobSQL = `
INSERT INTO durable_dead_letters (kind, type, queue, payload, idempotency_key, attempts, last_error, error_class, options,
    first_failed_at, dead_lettered_at)
VALUES ('job', @type, @queue, @payload, @key, @attempts, @error, @class, @options, coalesce(@first_failed_at, @now), @now)`
)

// ResolveActivity implements store.Store: it deletes the task if the
// attempt still holds it, and appends the outcome to the task's run, whose
// workflow task it makes ready (or claims for in.ClaimAs).
func (s *Store) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	in.Event = store.EscapeEvent(in.Event) // as it is stored, for the hand-off too
	attrs, err := encodeEvent(in.Event)
	if err == nil {
		err = checkText("worker ID", in.ClaimAs)
	}
	if err != nil {
		return store.Ready{}, fmt.Errorf("resolve activity task %d: %w", in.TaskID, err)
	}
	var (
		ready store.Ready
		found bool
	)
	err = s.write(ctx, func(tx *sql.Tx) error {
		var (
			runID, activity, queue, input, key string
			options                            sql.NullString
			firstFailed                        sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, resolvableSQL, sql.Named("id", in.TaskID), sql.Named("attempt", in.Attempt),
			sql.Named("held", in.Held)).Scan(&runID, &activity, &queue, &input, &key, &options, &firstFailed)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		if _, err := tx.ExecContext(ctx, deleteActivityTaskSQL, sql.Named("id", in.TaskID)); err != nil {
			return err
		}
		if runID == "" {
			f, failed := in.Event.(history.ActivityFailed)
			if !failed {
				return nil
			}
			_, err := tx.ExecContext(ctx, deadJobSQL, sql.Named("type", activity), sql.Named("queue", queue),
				sql.Named("payload", input), sql.Named("key", key), sql.Named("attempts", f.Failure.Attempts),
				sql.Named("error", f.Failure.Message), sql.Named("class", f.Failure.Class), sql.Named("options", options),
				sql.Named("first_failed_at", firstFailed), sql.Named("now", micros(in.Now)))
			if err != nil {
				return fmt.Errorf("keep the failed job as a dead letter: %w", err)
			}
			return nil
		}
		return recordOutcome(ctx, tx, in, runID, attrs, &ready)
	})
	if err != nil {
		return store.Ready{}, fmt.Errorf("resolve activity task %d: %w", in.TaskID, translate(err))
	}
	if !found {
		return store.Ready{}, store.ErrLeaseLost
	}
	return ready, nil
}

// recordOutcome appends an activity's outcome to its run, if it is running,
// and makes the run's workflow task ready, or claims it for in.ClaimAs,
// unless the run has one.
func recordOutcome(ctx context.Context, tx *sql.Tx, in store.ResolveActivityParams, runID, attrs string, ready *store.Ready) error {
	h, ok, err := readRun(ctx, tx, runID)
	if err != nil || !ok || !h.running() {
		return err
	}
	eventID, at, err := appendEvents(ctx, tx, h, []string{in.Event.EventType()}, []string{attrs}, in.Now)
	if err != nil {
		return err
	}
	if in.ClaimAs == "" {
		made, err := readyTask(ctx, tx, runID, h.queue, micros(in.Now))
		if made {
			ready.WorkflowQueues = []string{h.queue}
		}
		return err
	}
	until := micros(in.Now.Add(in.Lease))
	token, err := claimedTask(ctx, tx, runID, h.queue, in.ClaimAs, until)
	if err != nil || token == 0 {
		return err
	}
	ready.WorkflowTasks = []store.WorkflowTask{{
		RunID: runID, WorkflowID: h.workflowID, WorkflowType: h.workflowType, Queue: h.queue, Token: token,
		LockedUntil: fromMicros(until), ProcessedEventID: h.processedEventID, TraceContext: h.trace,
		ParentRunID: h.parentRunID,
		Events:      []history.Event{{ID: eventID, Time: fromMicros(at), Attributes: in.Event}},
	}}
	return nil
}

const (
	retryActivitySQL = `
UPDATE durable_activity_tasks
SET locked_by = NULL, locked_until = NULL, run_after = @run_after, last_error = @error, last_error_class = @class,
    first_failed_at = coalesce(first_failed_at, @now),
    max_attempts = CASE WHEN @rate_limited AND max_attempts > 0 THEN max_attempts + 1 ELSE max_attempts END,
    rate_limited = rate_limited + CASE WHEN @rate_limited THEN 1 ELSE 0 END
WHERE id = @id AND attempt = @attempt AND NOT canceled`
	canceledActivitySQL = `SELECT EXISTS (SELECT 1 FROM durable_activity_tasks WHERE id = @id AND attempt = @attempt AND canceled)`
)

// RetryActivity implements store.Store.
func (s *Store) RetryActivity(ctx context.Context, in store.RetryActivityParams) error {
	var (
		n        int64
		canceled bool
	)
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		n, err = affected(tx.ExecContext(ctx, retryActivitySQL, sql.Named("run_after", micros(in.RunAfter)),
			sql.Named("error", store.EscapeText(in.Error)), sql.Named("class", store.EscapeText(in.ErrorClass)),
			sql.Named("now", micros(in.Now)), sql.Named("rate_limited", in.RateLimited),
			sql.Named("id", in.TaskID), sql.Named("attempt", in.Attempt)))
		if err != nil || n == 1 {
			return err
		}
		return tx.QueryRowContext(ctx, canceledActivitySQL, sql.Named("id", in.TaskID), sql.Named("attempt", in.Attempt)).Scan(&canceled)
	})
	switch {
	case err != nil:
		return fmt.Errorf("retry activity task %d: %w", in.TaskID, translate(err))
	case canceled:
		return store.ErrActivityCanceled
	case n == 0:
		return store.ErrLeaseLost
	}
	return nil
}

// releaseActivityTasksSQL gives back a worker's live claims (or the one of
// task @task at attempt @attempt, when @task is not 0). The attempt number
// stays (it fences the released claim), so the budget grows by one
// instead.
const releaseActivityTasksSQL = `
UPDATE durable_activity_tasks
SET locked_by = NULL, locked_until = NULL, run_after = @now,
    max_attempts = CASE WHEN max_attempts > 0 THEN max_attempts + 1 ELSE 0 END
WHERE locked_by = @worker AND locked_until > @now AND (@task = 0 OR (id = @task AND attempt = @attempt))
RETURNING queue`

// ReleaseActivityTasks implements store.Store.
func (s *Store) ReleaseActivityTasks(ctx context.Context, in store.ReleaseParams) error {
	var queues []string
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		queues, err = queryAll(ctx, tx, releaseActivityTasksSQL, func(rows *sql.Rows) (q string, err error) {
			err = rows.Scan(&q)
			return q, err
		}, sql.Named("now", micros(in.Now)), sql.Named("worker", in.WorkerID), sql.Named("task", in.TaskID),
			sql.Named("attempt", in.Attempt))
		return err
	})
	if err != nil {
		if in.TaskID != 0 {
			return fmt.Errorf("release activity task %d (attempt %d) of worker %s: %w", in.TaskID, in.Attempt, in.WorkerID, err)
		}
		return fmt.Errorf("release activity tasks of worker %s: %w", in.WorkerID, err)
	}
	s.announce(store.NoteActivityTasks, queues)
	return nil
}

// The next due task of a queue, by the ready index in order.
const (
	nextWorkflowDueSQL = `SELECT run_after FROM durable_workflow_tasks WHERE queue = @queue ORDER BY run_after LIMIT 1`
	nextActivityDueSQL = `SELECT run_after FROM durable_activity_tasks WHERE queue = @queue ORDER BY run_after LIMIT 1`
)

// NextDue implements store.Store.
func (s *Store) NextDue(ctx context.Context, kind, queue string) (time.Time, bool, error) {
	query := nextActivityDueSQL
	if kind == "workflow" {
		query = nextWorkflowDueSQL
	}
	var at int64
	switch err := s.reader().QueryRowContext(ctx, query, sql.Named("queue", queue)).Scan(&at); {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("next due %s task on queue %q: %w", kind, queue, err)
	}
	return fromMicros(at), true, nil
}

const (
	// heartbeatActivitySQL keeps the details and extends the claim, or,
	// with @hand_off, passes the claim to that holder and keeps the
	// details there are.
	heartbeatActivitySQL = `
UPDATE durable_activity_tasks
SET heartbeat = CASE WHEN @hand_off = '' THEN @details ELSE heartbeat END,
    locked_by = coalesce(nullif(@hand_off, ''), locked_by), locked_until = @until, run_after = @until
WHERE id = @id AND attempt = @attempt AND locked_by IS NOT NULL AND NOT canceled`
	// heartbeatRefusedSQL tells, for an activity whose heartbeat found no
	// claim to extend, whether its run gave up on it: it closed, or
	// recorded the activity's cancellation, with no outcome of it in
	// history.
	heartbeatRefusedSQL = `
SELECT EXISTS (
    SELECT 1 FROM durable_runs r
    WHERE r.run_id = @run_id
      AND (r.status <> 'running' OR EXISTS (
          SELECT 1 FROM durable_events e
          WHERE e.run_id = @run_id AND e.type = 'activity_canceled' AND e.attributes ->> '$.seq' = @seq))
      AND NOT EXISTS (
          SELECT 1 FROM durable_events e
          WHERE e.run_id = @run_id AND e.type IN ('activity_completed', 'activity_failed')
            AND e.attributes ->> '$.seq' = @seq))`
)

// HeartbeatActivity implements store.Store.
func (s *Store) HeartbeatActivity(ctx context.Context, in store.HeartbeatParams) error {
	if err := errors.Join(checkPayload("details", in.Details), checkText("holder", in.HandOff)); err != nil {
		return fmt.Errorf("heartbeat activity task %d: %w", in.TaskID, err)
	}
	var (
		n        int64
		canceled bool
	)
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		n, err = affected(tx.ExecContext(ctx, heartbeatActivitySQL, sql.Named("hand_off", in.HandOff),
			sql.Named("details", jsonText(in.Details)), sql.Named("until", micros(in.LockedUntil)),
			sql.Named("id", in.TaskID), sql.Named("attempt", in.Attempt)))
		if err != nil || n == 1 || in.RunID == "" {
			return err
		}
		return tx.QueryRowContext(ctx, heartbeatRefusedSQL, sql.Named("run_id", in.RunID), sql.Named("seq", in.Seq)).Scan(&canceled)
	})
	switch {
	case err != nil:
		return fmt.Errorf("heartbeat activity task %d: %w", in.TaskID, translate(err))
	case canceled:
		return store.ErrActivityCanceled
	case n == 0:
		return store.ErrLeaseLost
	}
	return nil
}

const (
	enqueueJobSQL = `
INSERT INTO durable_activity_tasks (activity, queue, input, idempotency_key, options, max_attempts, lease_ms, run_after, created_at)
VALUES (@activity, @queue, @input, @key, @options, @max_attempts, @lease_ms, @run_after, @now)
ON CONFLICT (idempotency_key) WHERE run_id IS NULL DO NOTHING`
	pendingJobSQL = `SELECT id FROM durable_activity_tasks WHERE idempotency_key = @key AND run_id IS NULL`
)

// EnqueueJob implements store.Store.
func (s *Store) EnqueueJob(ctx context.Context, in store.EnqueueJobParams) (int64, bool, error) {
	t := in.Task
	if err := checkActivities([]store.NewActivityTask{t}); err != nil {
		return 0, false, fmt.Errorf("enqueue job %s: %w", t.Activity, err)
	}
	var (
		id       int64
		existing bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		id, existing, err = enqueue(ctx, tx, t, "", micros(in.Now))
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("enqueue job %s: %w", t.Activity, translate(err))
	}
	if in.Notify && !existing && micros(t.RunAfter) <= micros(in.Now) {
		s.announce(store.NoteActivityTasks, []string{t.Queue})
	}
	return id, existing, nil
}

// enqueue queues t, a standalone job or (with runID) a run's activity, at
// attempt 0. A job whose idempotency key a pending job holds is left out:
// then it returns that job's ID, and existing true.
func enqueue(ctx context.Context, tx *sql.Tx, t store.NewActivityTask, runID string, now int64) (id int64, existing bool, err error) {
	query := enqueueJobSQL
	if runID != "" {
		query = insertActivitySQL
	}
	res, err := tx.ExecContext(ctx, query, sql.Named("run_id", runID), sql.Named("seq", t.Seq), sql.Named("activity", t.Activity),
		sql.Named("queue", t.Queue), sql.Named("input", jsonText(t.Input)), sql.Named("key", t.IdempotencyKey),
		sql.Named("options", jsonText(t.Options)), sql.Named("max_attempts", t.MaxAttempts),
		sql.Named("lease_ms", t.Lease.Milliseconds()), sql.Named("run_after", micros(t.RunAfter)), sql.Named("now", now),
		sql.Named("attempt", 0), sql.Named("locked_by", nil), sql.Named("locked_until", nil))
	n, err := affected(res, err)
	switch {
	case err != nil:
		return 0, false, err
	case n == 1:
		id, err = res.LastInsertId()
		return id, false, err
	case runID != "":
		return 0, false, fmt.Errorf("run %s already has an activity task for seq %d", runID, t.Seq)
	}
	if err := tx.QueryRowContext(ctx, pendingJobSQL, sql.Named("key", t.IdempotencyKey)).Scan(&id); err != nil {
		return 0, false, fmt.Errorf("find the pending job with key %q: %w", t.IdempotencyKey, err)
	}
	return id, true, nil
}

// unstartedActivitiesSQL finds tasks never claimed whose schedule-to-start
// timeout (in their options, in nanoseconds) has ended, by the partial
// index of such tasks.
const unstartedActivitiesSQL = `
SELECT t.id, coalesce(t.run_id, ''), coalesce(r.workflow_id, ''), coalesce(r.queue, ''), coalesce(r.trace_context, ''),
    t.seq, t.activity, t.queue, t.idempotency_key, t.max_attempts, t.options, t.created_at
FROM durable_activity_tasks t LEFT JOIN durable_runs r ON r.run_id = t.run_id
WHERE t.attempt = 0 AND json_type(t.options, '$.ScheduleToStartTimeout') IS NOT NULL
  AND t.created_at + (t.options ->> '$.ScheduleToStartTimeout') / 1000 <= @now
ORDER BY t.created_at, t.id
LIMIT @limit`

// UnstartedActivities implements store.Store.
func (s *Store) UnstartedActivities(ctx context.Context, now time.Time, limit int) ([]store.ActivityTask, error) {
	tasks, err := queryAll(ctx, s.reader(), unstartedActivitiesSQL, func(rows *sql.Rows) (store.ActivityTask, error) {
		var (
			t                    store.ActivityTask
			options              []byte
			maxAttempts, created int64
		)
		err := rows.Scan(&t.ID, &t.RunID, &t.WorkflowID, &t.WorkflowQueue, &t.TraceContext, &t.Seq, &t.Activity, &t.Queue,
			&t.IdempotencyKey, &maxAttempts, &options, &created)
		t.Options, t.MaxAttempts, t.ScheduledAt = options, int(maxAttempts), fromMicros(created)
		return t, err
	}, sql.Named("now", micros(now)), sql.Named("limit", limit))
	if err != nil {
		return nil, fmt.Errorf("list activities past their schedule-to-start timeout: %w", err)
	}
	return tasks, nil
}
