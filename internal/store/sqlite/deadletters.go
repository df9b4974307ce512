package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

const deadLetterColumns = `
    id, kind, type, queue, payload, coalesce(idempotency_key, ''), coalesce(run_id, ''),
    coalesce(workflow_id, ''), attempts, last_error, coalesce(error_class, ''), options,
    first_failed_at, dead_lettered_at, redriven_at, coalesce(redrive_run_id, '')
FROM durable_dead_letters`

const (
	listDeadLettersSQL = `SELECT ` + deadLetterColumns + `
WHERE (@kind = '' OR kind = @kind)
  AND (@type = '' OR type = @type)
  AND (NOT @pending OR redriven_at IS NULL)
  AND (@before = 0 OR id < @before)
ORDER BY id DESC
LIMIT @limit`
	getDeadLetterSQL = `SELECT ` + deadLetterColumns + ` WHERE id = @id`
)

// scanDeadLetter reads a row of deadLetterColumns.
func scanDeadLetter(row interface{ Scan(...any) error }) (store.DeadLetter, error) {
	var (
		d                   store.DeadLetter
		payload, options    []byte
		attempts            int64
		firstFailed, deadAt int64
		redriven            sql.NullInt64
	)
	err := row.Scan(&d.ID, &d.Kind, &d.Type, &d.Queue, &payload, &d.IdempotencyKey, &d.RunID, &d.WorkflowID,
		&attempts, &d.LastError, &d.ErrorClass, &options, &firstFailed, &deadAt, &redriven, &d.RedriveRunID)
	d.Payload, d.Options, d.Attempts = payload, options, int(attempts)
	d.FirstFailedAt, d.DeadLetteredAt, d.RedrivenAt = fromMicros(firstFailed), fromMicros(deadAt), nullTime(redriven)
	return d, err
}

// ListDeadLetters implements store.Store.
func (s *Store) ListDeadLetters(ctx context.Context, f store.DeadLetterFilter) ([]store.DeadLetter, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	ds, err := queryAll(ctx, s.reader(), listDeadLettersSQL, func(rows *sql.Rows) (store.DeadLetter, error) { return scanDeadLetter(rows) },
		sql.Named("kind", f.Kind), sql.Named("type", f.Type), sql.Named("pending", f.Pending), sql.Named("before", f.BeforeID),
		sql.Named("limit", f.Limit))
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return ds, nil
}

// GetDeadLetter implements store.Store.
func (s *Store) GetDeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	return getDeadLetter(ctx, s.reader(), id)
}

// getDeadLetter reads dead letter id, or returns store.ErrNotFound.
func getDeadLetter(ctx context.Context, q querier, id int64) (store.DeadLetter, error) {
	d, err := scanDeadLetter(q.QueryRowContext(ctx, getDeadLetterSQL, sql.Named("id", id)))
	if errors.Is(err, sql.ErrNoRows) {
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	return d, nil
}

const (
	markRedrivenSQL = `UPDATE durable_dead_letters SET redriven_at = @now, redrive_run_id = @run_id WHERE id = @id`
	// copyEventsSQL copies a failed run's history up to @cut (exclusive)
	// into the run that continues it, times and all.
	copyEventsSQL = `
INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
SELECT @new_run, event_id, type, attributes, created_at FROM durable_events
WHERE run_id = @old_run AND event_id < @cut`
)

// RedriveDeadLetter implements store.Store.
func (s *Store) RedriveDeadLetter(ctx context.Context, in store.RedriveParams) (store.RedriveResult, error) {
	var res store.RedriveResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		d, err := getDeadLetter(ctx, tx, in.ID)
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
			if err := redriveJob(ctx, tx, t, in, &res); err != nil {
				return err
			}
		case store.DeadWorkflow:
			if err := reopenRun(ctx, tx, d, in, &res); err != nil {
				return err
			}
		default:
			return fmt.Errorf("dead letter %d has unknown kind %q", d.ID, d.Kind)
		}
		if _, err := tx.ExecContext(ctx, markRedrivenSQL, sql.Named("now", micros(in.Now)), sql.Named("run_id", nullText(res.RunID)),
			sql.Named("id", d.ID)); err != nil {
			return err
		}
		res.Redriven = true
		return nil
	})
	if err != nil {
		// A conflict says what holds the dead letter back; nothing else
		// of res happened.
		return store.RedriveResult{PendingTaskID: res.PendingTaskID, OpenRunID: res.OpenRunID},
			fmt.Errorf("redrive dead letter %d: %w", in.ID, translate(err))
	}
	return res, nil
}

// redriveJob queues a dead job's task t again, unless a pending job holds
// its idempotency key: then it returns store.ErrConflict, naming that job's
// task in res.PendingTaskID.
func redriveJob(ctx context.Context, tx *sql.Tx, t store.NewActivityTask, in store.RedriveParams, res *store.RedriveResult) error {
	if err := checkActivities([]store.NewActivityTask{t}); err != nil {
		return err
	}
	id, existing, err := enqueue(ctx, tx, t, "", micros(in.Now))
	if err != nil {
		return err
	}
	if existing {
		res.PendingTaskID = id
		return fmt.Errorf("job with idempotency key %q is already pending (task %d): %w", t.IdempotencyKey, id, store.ErrConflict)
	}
	res.Ready.ActivityQueues = []string{t.Queue}
	return nil
}

// reopenRun continues a failed run in a new one: its history up to the last
// activity failure, with that activity scheduled again; or, when no activity
// failed, up to the workflow's failure, with a workflow task.
func reopenRun(ctx context.Context, tx *sql.Tx, d store.DeadLetter, in store.RedriveParams, res *store.RedriveResult) error {
	if err := checkRunID(in.NewRunID); err != nil {
		return err
	}
	if open, _, err := openRunOf(ctx, tx, d.WorkflowID); err != nil || open != "" {
		if err == nil {
			res.OpenRunID = open
			err = fmt.Errorf("workflow %q has an open run %s: %w", d.WorkflowID, open, store.ErrConflict)
		}
		return err
	}
	events, err := listEvents(ctx, tx, d.RunID, 0)
	if err != nil {
		return err
	}
	cut, failed := store.RedriveCut(events)
	old, ok, err := readRun(ctx, tx, d.RunID)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("dead letter %d: its run %s is gone", d.ID, d.RunID)
	}
	now := micros(in.Now)
	err = insertRun(ctx, tx, newRun{
		runID: in.NewRunID, workflowID: old.workflowID, workflowType: old.workflowType, queue: old.queue, input: old.input,
		nextEventID: cut, processedEventID: cut - 1, createdAt: now,
		updatedAt: max(old.updatedAt, now), // not before the copied events (see runHead.eventTime)
	})
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, copyEventsSQL, sql.Named("new_run", in.NewRunID), sql.Named("old_run", d.RunID),
		sql.Named("cut", cut)); err != nil {
		return fmt.Errorf("copy the history of run %s: %w", d.RunID, err)
	}
	res.RunID = in.NewRunID
	if failed == nil {
		if _, err := readyTask(ctx, tx, in.NewRunID, d.Queue, now); err != nil {
			return err
		}
		res.Ready.WorkflowQueues = []string{d.Queue}
		return nil
	}
	for _, ev := range events[:cut-1] {
		if a, ok := ev.Attributes.(history.ActivityScheduled); ok && a.Seq == failed.Seq {
			t, err := in.Task(in.NewRunID, a)
			if err != nil {
				return err
			}
			if err := checkActivities([]store.NewActivityTask{t}); err != nil {
				return err
			}
			if _, _, err := enqueue(ctx, tx, t, in.NewRunID, now); err != nil {
				return err
			}
			res.Ready.ActivityQueues = []string{t.Queue}
			return nil
		}
	}
	return fmt.Errorf("run %s: no ActivityScheduled for the failed activity (seq %d)", d.RunID, failed.Seq)
}
