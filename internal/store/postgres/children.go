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
    SET next_event_id = r.next_event_id + 1, updated_at = ` + eventTime + `
    WHERE r.run_id = @run_id AND ` + runOpen + `
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
SELECT (SELECT queue FROM run), (SELECT queue FROM wt)`

	// openChildrenSQL lists the open children a closing parent must
	// terminate or cancel, without locking them (see "Lock order"), except
	// those it has handled already.
	openChildrenSQL = `
SELECT run_id::text, coalesce(parent_close_policy, '') FROM durable_runs
WHERE parent_run_id = @parent AND status = 'running' AND coalesce(parent_close_policy, '') <> 'abandon'
  AND NOT run_id::text = ANY(@seen::text[])
ORDER BY run_id`

	// lockParentRunSQL locks the run a closing child reports to.
	lockParentRunSQL = `SELECT 1 FROM durable_runs WHERE run_id = $1 FOR NO KEY UPDATE`

	terminateByRunSQL = `
WITH run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + 1, updated_at = ` + eventTime + `, status = 'terminated',
        closed_at = ` + eventTime + `,
        failure = jsonb_build_object('message', 'terminated: ' || @reason::text, 'class', 'terminated')
    WHERE r.run_id = @run_id AND ` + runOpen + `
    RETURNING r.run_id, r.next_event_id - 1 AS event_id, r.updated_at AS at
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id, 'workflow_terminated', jsonb_build_object('reason', @reason::text), at FROM run
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
			Format: history.FormatTasks,
		})
		if err != nil {
			return err
		}
		var n int
		err = s.queryRow(ctx, createChildSQL, scanInto(&n), namedArgs{
			"run_id": c.RunID, "workflow_id": c.WorkflowID, "workflow_type": c.WorkflowType, "queue": c.Queue,
			"input": jsonArg(c.Input), "parent": in.RunID, "seq": c.Seq, "policy": c.ParentClosePolicy,
			"started": string(started), "now": in.Now,
		})
		if err != nil {
			return fmt.Errorf("start child workflow %q: %w", c.WorkflowID, err)
		}
		if n == 1 {
			ready.WorkflowQueues = append(ready.WorkflowQueues, c.Queue)
			if err := s.appendEvent(ctx, in.RunID, history.ChildWorkflowStarted{Seq: c.Seq, RunID: c.RunID}, in.Now, ready); err != nil {
				return err
			}
			continue
		}
		fail := history.ChildWorkflowFailed{Seq: c.Seq, Failure: history.Failure{
			Message: fmt.Sprintf("workflow ID %q already has an open run", c.WorkflowID), Class: "already_running",
		}}
		if err := s.appendEvent(ctx, in.RunID, fail, in.Now, ready); err != nil {
			return err
		}
	}
	for _, r := range in.External {
		if err := s.sendExternal(ctx, in, r, ready); err != nil {
			return err
		}
	}
	for _, seq := range in.WaitCanceledActivities {
		if err := s.cancelWaiting(ctx, in, seq, ready); err != nil {
			return err
		}
	}
	if in.Close == nil {
		return nil
	}
	if reportsToParent(in) {
		if err := s.reportToParent(ctx, in.RunID, in.ParentRunID, in.Close, in.Now, ready); err != nil {
			return err
		}
	}
	if in.CloseChildren {
		return s.closeChildren(ctx, in.RunID, in.Now, ready)
	}
	return nil
}

// sendExternal appends an external request's event to its target's open
// run, then its outcome to the sending run. The target's rows are locked
// after the sender's, as a closing parent locks its children's; two runs
// that signal each other in the same instant can deadlock, and PostgreSQL
// then aborts one commit, whose task runs again (see "Lock order").
func (s *Store) sendExternal(ctx context.Context, in store.CommitWorkflowTaskParams, r store.ExternalRequest, ready *store.Ready) error {
	var outcome history.Attributes = history.ExternalRequestCompleted{Seq: r.Seq}
	sent, err := s.SignalRun(ctx, store.SignalParams{WorkflowID: r.WorkflowID, RunID: r.RunID, Now: in.Now}, r.Event)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrRunClosed):
		msg := "no run is open"
		if r.RunID != "" {
			msg = "run " + r.RunID + " is not open"
		}
		outcome = history.ExternalRequestFailed{Seq: r.Seq, Failure: history.Failure{Message: msg, Class: "not_found"}}
	case err != nil:
		return err
	default:
		ready.WorkflowQueues = append(ready.WorkflowQueues, sent.WorkflowQueues...)
	}
	return s.appendEvent(ctx, in.RunID, outcome, in.Now, ready)
}

// cancelWaitingSQL marks the task of a canceled activity whose workflow
// waits for it (WaitForCancellation) if an attempt holds a live claim on
// it; it then finishes, and its outcome is recorded as usual.
const cancelWaitingSQL = `
UPDATE durable_activity_tasks SET canceled = true
WHERE run_id = @run_id AND seq = @seq AND locked_by IS NOT NULL AND locked_until > @now
RETURNING id`

// cancelWaiting cancels an activity whose workflow waits for it to
// acknowledge: a running attempt is left to finish (its task marked
// canceled), and an activity no attempt runs is removed, with its
// ActivityFailed of class "canceled" appended at once.
func (s *Store) cancelWaiting(ctx context.Context, in store.CommitWorkflowTaskParams, seq int64, ready *store.Ready) error {
	if in.Close != nil {
		return nil // the close removed every task of the run
	}
	var id int64
	err := s.queryRow(ctx, cancelWaitingSQL, scanInto(&id), namedArgs{"run_id": in.RunID, "seq": seq, "now": in.Now})
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("cancel activity seq %d: %w", seq, err)
	}
	if _, err := s.db.Exec(ctx, `DELETE FROM durable_activity_tasks WHERE run_id = $1 AND seq = $2`, in.RunID, seq); err != nil {
		return fmt.Errorf("cancel activity seq %d: %w", seq, err)
	}
	failed := history.ActivityFailed{Seq: seq, Failure: history.Failure{Message: "canceled before an attempt ran it", Class: "canceled"}}
	return s.appendEvent(ctx, in.RunID, failed, in.Now, ready)
}

// reportToParent appends a closed child's outcome to its parent.
func (s *Store) reportToParent(ctx context.Context, childRunID, parentRunID string, c *store.CloseRun, now time.Time, ready *store.Ready) error {
	var seq int64
	if err := s.queryRow(ctx, `SELECT coalesce(parent_seq, 0) FROM durable_runs WHERE run_id = $1`, scanInto(&seq), childRunID); err != nil {
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

// Lock order. Every writer locks a run's rows in one order: its workflow
// task, then its activity tasks by seq, then the run (see lockOpenRun and
// commitWorkflowTaskSQL). A transaction that touches a parent and its
// children goes down the tree: the parent's rows before any row of its
// children, and the children one by one in run ID order, each in the order
// above. Two transactions do that:
//
//   - a closing parent (its commit, or Terminate) locks its own rows, then
//     each child it terminates or cancels (closeChildren);
//   - a closing child (its commit, or Terminate) reports to its parent by
//     updating the parent's run row, so it locks that row first, before
//     any row of its own (lockParentFirst, lockOpenRun).
//
// Had the child locked the parent's run only to report, after its own rows,
// a parent and a child closing together would each hold what the other
// waits for: the child its rows, waiting for the parent's run; the parent
// its run, waiting for the child's rows. PostgreSQL breaks such a cycle
// after deadlock_timeout (1s) by aborting one side with 40P01. Going down
// the tree, the child's close waits for the parent's run while it holds
// nothing the parent needs, and whichever gets the parent's run first
// commits. If the child does, its report lands in the parent's history
// before the parent's close, which then skips the closed child. If the
// parent does, the child's commit then finds its task gone if the policy
// terminated it (ErrLeaseLost), or commits after the cancel request the
// policy appended, and its report finds the parent closed and adds nothing.
//
// Group commits (group.go) go across runs in run ID order, not down the
// tree, so a group and a family transaction can still, rarely, form a
// cycle: a group that holds a child's activity task and then waits for the
// parent's run, say. PostgreSQL aborts one of them, and nothing is lost:
// an aborted group retries its writes one by one; an aborted commit is
// rolled back whole (its fence still holds) and its task runs again when
// its lease ends; an aborted Terminate returns the error (40P01, transient)
// to its caller, who may retry it.

// lockParentFirst locks the parent's run of a closing child that reports
// to it, before the commit touches any row of the child.
func lockParentFirst(ctx context.Context, tx pgx.Tx, in store.CommitWorkflowTaskParams) error {
	if !reportsToParent(in) {
		return nil
	}
	_, err := tx.Exec(ctx, lockParentRunSQL, in.ParentRunID)
	return err
}

// reportsToParent says whether a commit closes a child that reports its
// outcome to its parent (a continued run reports nothing: its continuation,
// which has the same parent, will).
func reportsToParent(in store.CommitWorkflowTaskParams) bool {
	return in.Close != nil && in.ParentRunID != "" && in.Close.Status != store.StatusContinuedAsNew
}

// closeChildren applies the parent-close policy of each open child. It
// locks each child (workflow task, activity tasks, run) before it writes to
// it, in run ID order. A child that closed while it waited (its own commit
// went first) needs nothing, but it may have continued as new: the
// continuation has the same parent, so the children are listed again until
// a listing finds only children it has handled.
func (s *Store) closeChildren(ctx context.Context, parentRunID string, now time.Time, ready *store.Ready) error {
	seen := []string{} // not nil: NULL would match nothing
	for {
		type child struct{ runID, policy string }
		children, err := queryIndexed(ctx, s, openChildrenSQL, namedArgs{"parent": parentRunID, "seen": seen},
			func(row pgx.CollectableRow) (child, error) {
				var c child
				err := row.Scan(&c.runID, &c.policy)
				return c, err
			})
		if err != nil {
			return err
		}
		again := false
		for _, c := range children {
			seen = append(seen, c.runID)
			open, err := lockRun(ctx, s.db, c.runID)
			if err != nil {
				return err
			}
			if !open {
				again = true
				continue
			}
			if c.policy == "cancel" {
				if err := s.appendEvent(ctx, c.runID, history.WorkflowCancelRequested{Reason: "parent closed"}, now, ready); err != nil {
					return err
				}
				continue
			}
			var n int
			if err := s.queryRow(ctx, terminateByRunSQL, scanInto(&n), namedArgs{"run_id": c.runID, "reason": "parent closed", "now": now}); err != nil {
				return err
			}
		}
		if !again {
			return nil
		}
	}
}

// appendEvent appends ev to a running run and makes its task ready.
func (s *Store) appendEvent(ctx context.Context, runID string, ev history.Attributes, now time.Time, ready *store.Ready) error {
	attrs, err := history.Encode(ev)
	if err != nil {
		return err
	}
	var runQueue, taskQueue *string
	err = s.queryRow(ctx, appendEventSQL, scanInto(&runQueue, &taskQueue), namedArgs{
		"run_id": runID, "type": ev.EventType(), "attrs": string(attrs), "now": now,
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("append %s to run %s: %w", ev.EventType(), runID, err)
	}
	if taskQueue != nil {
		ready.WorkflowQueues = append(ready.WorkflowQueues, *taskQueue)
	}
	return nil
}
