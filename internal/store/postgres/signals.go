package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// signalRunSQL appends an event to the open run of a workflow ID and makes a
// workflow task ready (run row first, then the task: the common lock order).
const signalRunSQL = `
WITH run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + 1, updated_at = ` + eventTime + `
    WHERE r.workflow_id = @workflow_id AND r.status = 'running' AND (@run_id::uuid IS NULL OR r.run_id = @run_id)
    RETURNING r.run_id, r.queue, r.next_event_id - 1 AS event_id, r.updated_at AS at
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id, @type, @attrs, at FROM run
), wt AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after)
    SELECT run_id, queue, @now FROM run
    ON CONFLICT (run_id) DO NOTHING
    RETURNING queue
)
SELECT (SELECT count(*) FROM run),
    (SELECT queue FROM wt),
    (SELECT count(CASE WHEN @notify THEN pg_notify('durable', 'w:' || queue) END) FROM wt)`

// SignalRun implements store.Store.
func (s *Store) SignalRun(ctx context.Context, in store.SignalParams, event history.Attributes) (store.Ready, error) {
	var ready store.Ready
	attrs, err := store.EncodeEvent(event)
	if err != nil {
		return ready, fmt.Errorf("%s to workflow %q: %w", event.EventType(), in.WorkflowID, err)
	}
	var (
		n, notes int
		queue    *string
	)
	err = s.queryRow(ctx, signalRunSQL, scanInto(&n, &queue, &notes), namedArgs{
		"workflow_id": in.WorkflowID, "run_id": nilIfEmpty(in.RunID), "now": in.Now, "type": event.EventType(), "attrs": string(attrs), "notify": in.Notify,
	})
	if err != nil {
		return ready, fmt.Errorf("%s to workflow %q: %w", event.EventType(), in.WorkflowID, translate(err))
	}
	if n == 0 {
		return ready, s.noOpenRun(ctx, in.WorkflowID)
	}
	if queue != nil {
		ready.WorkflowQueues = []string{*queue}
	}
	return ready, nil
}

// noOpenRun tells store.ErrRunClosed from store.ErrNotFound
// (store.NoOpenRun).
func (s *Store) noOpenRun(ctx context.Context, workflowID string) error {
	return store.NoOpenRun(ctx, s, workflowID)
}

// Terminating a run deletes its tasks, so it locks them before the run row,
// in the order the writers that hold them do: a workflow-task commit locks
// its task row and then the run; an activity outcome deletes its task and
// then updates the run. Locking the run first deadlocks with either. A
// child reports to its parent, so it locks the parent's run before all
// that (see "Lock order" in children.go).
const (
	// openRunSQL finds the open run of a workflow ID, without locking it.
	openRunSQL = `
SELECT run_id::text, coalesce(parent_run_id::text, '') FROM durable_runs
WHERE workflow_id = $1 AND status = 'running'`
	lockWorkflowTaskSQL  = `SELECT 1 FROM durable_workflow_tasks WHERE run_id = $1 FOR UPDATE`
	lockActivityTasksSQL = `SELECT 1 FROM durable_activity_tasks WHERE run_id = $1 ORDER BY seq FOR UPDATE`
	// lockRunSQL locks the run last, and says whether it is still open.
	lockRunSQL = `SELECT count(*) FROM (SELECT 1 FROM durable_runs r WHERE r.run_id = $1 AND ` + runOpen + ` FOR UPDATE) r`
)

// lockOpenRun finds the open run of a workflow ID and locks its parent's
// run, its tasks and then the run, or returns an empty runID if there is
// no open run.
func lockOpenRun(ctx context.Context, tx pgx.Tx, workflowID string) (runID, parentRunID string, err error) {
	for {
		err := tx.QueryRow(ctx, openRunSQL, workflowID).Scan(&runID, &parentRunID)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", "", nil
		}
		if err != nil {
			return "", "", err
		}
		if parentRunID != "" {
			if _, err := tx.Exec(ctx, lockParentRunSQL, parentRunID); err != nil {
				return "", "", err
			}
		}
		open, err := lockRun(ctx, tx, runID)
		if err != nil {
			return "", "", err
		}
		if open {
			return runID, parentRunID, nil
		}
		// It closed meanwhile; a continuation may be open now.
	}
}

// lockRun locks a run's workflow task, its activity tasks and then the run,
// and says whether the run is still open.
func lockRun(ctx context.Context, db dbtx, runID string) (open bool, err error) {
	for _, sql := range []string{lockWorkflowTaskSQL, lockActivityTasksSQL} {
		if _, err := db.Exec(ctx, sql, runID); err != nil {
			return false, err
		}
	}
	var n int
	if err := db.QueryRow(ctx, lockRunSQL, runID).Scan(&n); err != nil {
		return false, err
	}
	return n == 1, nil
}

// TerminateRun implements store.Store.
func (s *Store) TerminateRun(ctx context.Context, in store.TerminateParams) (store.Ready, error) {
	var ready store.Ready
	var runID, parentRunID string
	in.Reason = store.EscapeText(in.Reason)
	closed := &store.CloseRun{Status: store.StatusTerminated, Failure: &history.Failure{Message: "terminated: " + in.Reason, Class: "terminated"}}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if runID, parentRunID, err = lockOpenRun(ctx, tx, in.WorkflowID); err != nil || runID == "" {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, terminateByRunSQL, namedArgs{"run_id": runID, "reason": in.Reason, "now": in.Now}).Scan(&n); err != nil {
			return err
		}
		ts := s.in(tx)
		if parentRunID != "" {
			if err := ts.reportToParent(ctx, runID, parentRunID, closed, in.Now, &ready); err != nil {
				return err
			}
		}
		return ts.closeChildren(ctx, runID, in.Now, &ready)
	})
	if err != nil {
		return ready, fmt.Errorf("terminate workflow %q: %w", in.WorkflowID, translate(err))
	}
	if runID == "" {
		return ready, s.noOpenRun(ctx, in.WorkflowID)
	}
	ready.ClosedRun, ready.Closed = runID, closed
	return ready, nil
}
