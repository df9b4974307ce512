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

const deadLetterColumns = `
    id, kind, type, queue, payload, coalesce(idempotency_key, ''), coalesce(run_id::text, ''),
    coalesce(workflow_id, ''), attempts, last_error, coalesce(error_class, ''), options,
    first_failed_at, dead_lettered_at, redriven_at, coalesce(redrive_run_id::text, '')
FROM durable_dead_letters`

const listDeadLettersSQL = `SELECT ` + deadLetterColumns + `
WHERE (@kind::text = '' OR kind = @kind)
  AND (@type::text = '' OR type = @type)
  AND (NOT @pending OR redriven_at IS NULL)
  AND (@before::bigint = 0 OR id < @before)
ORDER BY id DESC
LIMIT @limit`

func scanDeadLetter(row pgx.CollectableRow) (store.DeadLetter, error) {
	var d store.DeadLetter
	err := row.Scan(&d.ID, &d.Kind, &d.Type, &d.Queue, &d.Payload, &d.IdempotencyKey, &d.RunID, &d.WorkflowID,
		&d.Attempts, &d.LastError, &d.ErrorClass, &d.Options, &d.FirstFailedAt, &d.DeadLetteredAt, &d.RedrivenAt, &d.RedriveRunID)
	return d, err
}

// ListDeadLetters implements store.Store.
func (s *Store) ListDeadLetters(ctx context.Context, f store.DeadLetterFilter) ([]store.DeadLetter, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.db.Query(ctx, listDeadLettersSQL, namedArgs{
		"kind": f.Kind, "type": f.Type, "pending": f.Pending, "before": f.BeforeID, "limit": f.Limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	ds, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return ds, nil
}

// GetDeadLetter implements store.Store.
func (s *Store) GetDeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	return getDeadLetter(ctx, s.db, `SELECT `+deadLetterColumns+` WHERE id = $1`, id)
}

func getDeadLetter(ctx context.Context, db dbtx, sql string, id int64) (store.DeadLetter, error) {
	rows, err := db.Query(ctx, sql, id)
	if err != nil {
		return store.DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	return d, nil
}

const (
	markRedrivenSQL = `UPDATE durable_dead_letters SET redriven_at = $2, redrive_run_id = $3 WHERE id = $1`

	// insertActivityTaskSQL queues a redriven job (no run_id) or a redriven
	// run's failed activity. A pending job with the same idempotency key
	// leaves it out and returns no row; a run's activity cannot conflict
	// (the run is new), and would fail loudly if it did.
	insertActivityTaskSQL = `
INSERT INTO durable_activity_tasks (run_id, seq, activity, queue, input, idempotency_key, options, max_attempts, lease_ms, run_after, created_at)
VALUES (@run_id, @seq, @activity, @queue, @input, @key, @options, @max_attempts, @lease_ms, @run_after, @now)
ON CONFLICT (idempotency_key) WHERE run_id IS NULL DO NOTHING
RETURNING id`

	pendingJobSQL = `SELECT id FROM durable_activity_tasks WHERE idempotency_key = $1 AND run_id IS NULL`

	// reopenRunSQL starts the run a redriven workflow continues in. Its
	// history is copied up to cut (exclusive); the copy counts as processed.
	reopenRunSQL = `
WITH run AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id,
        processed_event_id, created_at, updated_at)
    -- updated_at not before the copied events (see eventTime).
    SELECT @new_run, workflow_id, workflow_type, queue, 'running', input, @cut::bigint, @cut::bigint - 1, @now,
        greatest(updated_at, @now)
    FROM durable_runs WHERE run_id = @old_run
    ON CONFLICT (workflow_id) WHERE status = 'running' DO NOTHING
    RETURNING run_id
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run.run_id, e.event_id, e.type, e.attributes, e.created_at
    FROM run, durable_events e
    WHERE e.run_id = @old_run AND e.event_id < @cut::bigint
)
SELECT count(*) FROM run`
)

// RedriveDeadLetter implements store.Store.
func (s *Store) RedriveDeadLetter(ctx context.Context, in store.RedriveParams) (store.RedriveResult, error) {
	var res store.RedriveResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		d, err := getDeadLetter(ctx, tx, `SELECT `+deadLetterColumns+` WHERE id = $1 FOR UPDATE`, in.ID)
		if err != nil {
			return err
		}
		if d.RedrivenAt != nil {
			res.RunID = d.RedriveRunID
			return nil
		}
		switch d.Kind {
		case store.DeadJob:
			t, err := in.Task("", history.ActivityScheduled{Activity: d.Type, Queue: d.Queue, Input: d.Payload, Options: d.Options})
			if err != nil {
				return err
			}
			t.IdempotencyKey = d.IdempotencyKey
			if err := redriveJob(ctx, tx, t, in.Now, &res); err != nil {
				return err
			}
		case store.DeadWorkflow:
			if err := s.reopenRun(ctx, tx, d, in, &res); err != nil {
				return err
			}
		default:
			return fmt.Errorf("dead letter %d has unknown kind %q", d.ID, d.Kind)
		}
		if _, err := tx.Exec(ctx, markRedrivenSQL, d.ID, in.Now, nilIfEmpty(res.RunID)); err != nil {
			return err
		}
		res.Redriven = true
		return nil
	})
	if err != nil {
		// A conflict says what holds the dead letter back; nothing else
		// of res happened.
		return store.RedriveResult{PendingTaskID: res.PendingTaskID, OpenRunID: res.OpenRunID},
			fmt.Errorf("redrive dead letter %d: %w", in.ID, err)
	}
	return res, nil
}

// redriveJob queues a dead job's task t again, unless a pending job holds
// its idempotency key: then it returns ErrConflict, naming that job's task
// in res.PendingTaskID.
func redriveJob(ctx context.Context, tx pgx.Tx, t store.NewActivityTask, now time.Time, res *store.RedriveResult) error {
	// The pending job may finish between the insert and the read that
	// names it, freeing the key: then the insert is tried again. Three
	// tries leave room for that twice; a third is a job being enqueued and
	// finished as fast as it can, and the conflict is reported.
	for range 3 {
		queued, err := insertActivityTask(ctx, tx, "", t, now)
		if err != nil {
			return err
		}
		if queued {
			res.Ready.ActivityQueues = []string{t.Queue}
			return nil
		}
		err = tx.QueryRow(ctx, pendingJobSQL, t.IdempotencyKey).Scan(&res.PendingTaskID)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("find the pending job with key %q: %w", t.IdempotencyKey, err)
		}
	}
	task := "" // the pending job may have finished before it could be named
	if res.PendingTaskID != 0 {
		task = fmt.Sprintf(" (task %d)", res.PendingTaskID)
	}
	return fmt.Errorf("job with idempotency key %q is already pending%s: %w", t.IdempotencyKey, task, store.ErrConflict)
}

// reopenRun continues a failed run in a new one: its history up to the last
// activity failure, with that activity scheduled again; or, when no activity
// failed, up to the workflow's failure, with a workflow task.
func (s *Store) reopenRun(ctx context.Context, tx pgx.Tx, d store.DeadLetter, in store.RedriveParams, res *store.RedriveResult) error {
	events, err := s.in(tx).ListEvents(ctx, d.RunID, 0)
	if err != nil {
		return err
	}
	cut, failed := store.RedriveCut(events)
	var n int
	err = tx.QueryRow(ctx, reopenRunSQL, namedArgs{"new_run": in.NewRunID, "old_run": d.RunID, "cut": cut, "now": in.Now}).Scan(&n)
	if err != nil {
		return translate(err)
	}
	if n == 0 {
		// The open run may close before this read: then none is named,
		// and redriving again succeeds.
		var parent string
		if err := tx.QueryRow(ctx, openRunSQL, d.WorkflowID).Scan(&res.OpenRunID, &parent); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("find the open run of workflow %q: %w", d.WorkflowID, err)
		}
		open := "an open run"
		if res.OpenRunID != "" {
			open += " " + res.OpenRunID
		}
		return fmt.Errorf("workflow %q has %s: %w", d.WorkflowID, open, store.ErrConflict)
	}
	res.RunID = in.NewRunID
	if failed == nil {
		_, err := tx.Exec(ctx, `INSERT INTO durable_workflow_tasks (run_id, queue, run_after) VALUES ($1, $2, $3)`, in.NewRunID, d.Queue, in.Now)
		res.Ready.WorkflowQueues = []string{d.Queue}
		return err
	}
	for _, ev := range events[:cut-1] {
		if a, ok := ev.Attributes.(history.ActivityScheduled); ok && a.Seq == failed.Seq {
			t, err := in.Task(in.NewRunID, a)
			if err != nil {
				return err
			}
			res.Ready.ActivityQueues = []string{t.Queue}
			_, err = insertActivityTask(ctx, tx, in.NewRunID, t, in.Now)
			return err
		}
	}
	return fmt.Errorf("run %s: no ActivityScheduled for the failed activity (seq %d)", d.RunID, failed.Seq)
}

// insertActivityTask queues t and reports whether it did: a job is left out
// while a pending job holds its idempotency key.
func insertActivityTask(ctx context.Context, tx pgx.Tx, runID string, t store.NewActivityTask, now time.Time) (bool, error) {
	var id int64
	err := tx.QueryRow(ctx, insertActivityTaskSQL, namedArgs{
		"run_id": nilIfEmpty(runID), "seq": t.Seq, "activity": t.Activity, "queue": t.Queue, "input": jsonArg(t.Input),
		"key": t.IdempotencyKey, "options": jsonArg(t.Options), "max_attempts": t.MaxAttempts,
		"lease_ms": t.Lease.Milliseconds(), "run_after": t.RunAfter, "now": now,
	}).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
