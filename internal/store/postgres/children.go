package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

const (
	// createChildSQL starts a child run, unless its workflow ID has an
	// open run.
	createChildSQL = `
WITH child AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, trace_context,
        parent_run_id, parent_seq, parent_close_policy, created_at, updated_at)
    SELECT @run_id, @workflow_id, @workflow_type, @queue, 'running', @input, 2, p.trace_context,
        p.run_id, @seq, @policy, @now, @now
    FROM durable_runs p WHERE p.run_id = @parent
    ON CONFLICT (workflow_id) WHERE status = 'running' DO NOTHING
    RETURNING run_id, queue
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, 1, 'workflow_started', @started, @now FROM child
), task AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after)
    SELECT run_id, queue, @now FROM child
)
SELECT count(*) FROM child`

	// appendEventSQL appends an event to a running run and makes its
	// workflow task ready.
	appendEventSQL = `
WITH run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + 1, updated_at = @now
    WHERE r.run_id = @run_id AND r.status = 'running'
    RETURNING r.run_id, r.queue, r.next_event_id - 1 AS event_id
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id, @type, @attrs, @now FROM run
), wt AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after)
    SELECT run_id, queue, @now FROM run
    ON CONFLICT (run_id) DO NOTHING
    RETURNING queue
)
SELECT (SELECT queue FROM run), (SELECT queue FROM wt)`

	openChildrenSQL = `
SELECT run_id::text, parent_close_policy FROM durable_runs
WHERE parent_run_id = @parent AND status = 'running'
ORDER BY run_id
FOR UPDATE`

	terminateByRunSQL = `
WITH run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + 1, updated_at = @now, status = 'terminated', closed_at = @now,
        failure = jsonb_build_object('message', 'terminated: ' || @reason::text, 'class', 'terminated')
    WHERE r.run_id = @run_id AND r.status = 'running'
    RETURNING r.run_id, r.next_event_id - 1 AS event_id
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id, 'workflow_terminated', jsonb_build_object('reason', @reason::text), @now FROM run
), wt AS (
    DELETE FROM durable_workflow_tasks t USING run WHERE t.run_id = run.run_id
), act AS (
    DELETE FROM durable_activity_tasks a USING run WHERE a.run_id = run.run_id
), tmr AS (
    DELETE FROM durable_timers d USING run WHERE d.run_id = run.run_id
)
SELECT count(*) FROM run`
)

// familyEffects does, inside a commit's transaction, what the commit means
// for other runs: it starts children, reports a closing child's outcome to
// its parent, and applies a closing parent's policies to its children.
func (s *Store) familyEffects(ctx context.Context, in store.CommitWorkflowTaskParams, ready *store.Ready) error {
	for _, c := range in.Children {
		started, err := json.Marshal(history.WorkflowStarted{
			WorkflowType: c.WorkflowType, WorkflowID: c.WorkflowID, Queue: c.Queue, Input: c.Input, Attempt: 1,
		})
		if err != nil {
			return err
		}
		var n int
		err = s.db.QueryRow(ctx, createChildSQL, namedArgs{
			"run_id": c.RunID, "workflow_id": c.WorkflowID, "workflow_type": c.WorkflowType, "queue": c.Queue,
			"input": jsonArg(c.Input), "parent": in.RunID, "seq": c.Seq, "policy": c.ParentClosePolicy,
			"started": string(started), "now": in.Now,
		}).Scan(&n)
		if err != nil {
			return fmt.Errorf("start child workflow %q: %w", c.WorkflowID, err)
		}
		if n == 1 {
			ready.WorkflowQueues = append(ready.WorkflowQueues, c.Queue)
			continue
		}
		fail := history.ChildWorkflowFailed{Seq: c.Seq, Failure: history.Failure{
			Message: fmt.Sprintf("workflow ID %q already has an open run", c.WorkflowID), Class: "already_running",
		}}
		if err := s.appendEvent(ctx, in.RunID, fail, in.Now, ready); err != nil {
			return err
		}
	}
	if in.Close == nil {
		return nil
	}
	if in.ParentRunID != "" && in.Close.Status != store.StatusContinuedAsNew {
		if err := s.reportToParent(ctx, in.RunID, in.ParentRunID, in.Close, in.Now, ready); err != nil {
			return err
		}
	}
	if in.CloseChildren {
		return s.closeChildren(ctx, in.RunID, in.Now, ready)
	}
	return nil
}

// reportToParent appends a closed child's outcome to its parent.
func (s *Store) reportToParent(ctx context.Context, childRunID, parentRunID string, c *store.CloseRun, now time.Time, ready *store.Ready) error {
	var seq int64
	if err := s.db.QueryRow(ctx, `SELECT coalesce(parent_seq, 0) FROM durable_runs WHERE run_id = $1`, childRunID).Scan(&seq); err != nil {
		return err
	}
	var ev history.Attributes = history.ChildWorkflowCompleted{Seq: seq, Result: c.Result}
	if c.Status != store.StatusCompleted {
		f := history.Failure{Message: c.Status, Class: c.Status}
		if c.Failure != nil {
			f = *c.Failure
		}
		ev = history.ChildWorkflowFailed{Seq: seq, Failure: f}
	}
	return s.appendEvent(ctx, parentRunID, ev, now, ready)
}

// closeChildren applies the parent-close policy of each open child.
func (s *Store) closeChildren(ctx context.Context, parentRunID string, now time.Time, ready *store.Ready) error {
	rows, err := s.db.Query(ctx, openChildrenSQL, namedArgs{"parent": parentRunID})
	if err != nil {
		return err
	}
	type child struct{ runID, policy string }
	children, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (child, error) {
		var c child
		var policy *string
		err := row.Scan(&c.runID, &policy)
		if policy != nil {
			c.policy = *policy
		}
		return c, err
	})
	if err != nil {
		return err
	}
	for _, c := range children {
		switch c.policy {
		case "abandon":
		case "cancel":
			if err := s.appendEvent(ctx, c.runID, history.WorkflowCancelRequested{Reason: "parent closed"}, now, ready); err != nil {
				return err
			}
		default:
			var n int
			if err := s.db.QueryRow(ctx, terminateByRunSQL, namedArgs{"run_id": c.runID, "reason": "parent closed", "now": now}).Scan(&n); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendEvent appends ev to a running run and makes its task ready.
func (s *Store) appendEvent(ctx context.Context, runID string, ev history.Attributes, now time.Time, ready *store.Ready) error {
	attrs, err := history.Encode(ev)
	if err != nil {
		return err
	}
	var runQueue, taskQueue *string
	err = s.db.QueryRow(ctx, appendEventSQL, namedArgs{
		"run_id": runID, "type": ev.EventType(), "attrs": string(attrs), "now": now,
	}).Scan(&runQueue, &taskQueue)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("append %s to run %s: %w", ev.EventType(), runID, err)
	}
	if taskQueue != nil {
		ready.WorkflowQueues = append(ready.WorkflowQueues, *taskQueue)
	}
	return nil
}
