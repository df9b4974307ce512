package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// A commit's effects on other runs: the children it starts, the signals and
// cancel requests it sends, the parent a closing child reports to and the
// children a closing parent closes. Postgres orders its row locks down the
// tree for these; here the commit's write transaction holds the whole file,
// so they are plain statements in the order they are made.

// familyEffects does, inside a commit's transaction, what the commit means
// for other runs (and the waited-for cancellations of its activities).
func familyEffects(ctx context.Context, tx *sql.Tx, in store.CommitWorkflowTaskParams, ready *store.Ready) error {
	for _, c := range in.Children {
		if err := startChild(ctx, tx, in, c, ready); err != nil {
			return err
		}
	}
	for _, r := range in.External {
		if err := sendExternal(ctx, tx, in, r, ready); err != nil {
			return err
		}
	}
	if in.Close == nil { // a close removed every task of the run
		for _, seq := range in.WaitCanceledActivities {
			if err := cancelWaiting(ctx, tx, in, seq, ready); err != nil {
				return err
			}
		}
	}
	if in.Close == nil {
		return nil
	}
	// A continued run reports nothing: its continuation, which has the
	// same parent, will.
	if in.ParentRunID != "" && in.Close.Status != store.StatusContinuedAsNew {
		if err := reportToParent(ctx, tx, in.RunID, in.ParentRunID, in.Close, in.Now, ready); err != nil {
			return err
		}
	}
	if in.CloseChildren {
		return closeChildren(ctx, tx, in.RunID, in.Now, ready)
	}
	return nil
}

// startChild starts a child workflow of the committing run, unless its
// workflow ID has an open run, and records which in the parent's history:
// ChildWorkflowStarted, or ChildWorkflowFailed of class already_running.
func startChild(ctx context.Context, tx *sql.Tx, in store.CommitWorkflowTaskParams, c store.NewChild, ready *store.Ready) error {
	open, _, err := openRunOf(ctx, tx, c.WorkflowID)
	if err != nil {
		return err
	}
	if open != "" {
		fail := history.ChildWorkflowFailed{Seq: c.Seq, Failure: history.Failure{
			Message: fmt.Sprintf("workflow ID %q already has an open run", c.WorkflowID), Class: "already_running",
		}}
		return appendFamilyEvent(ctx, tx, in.RunID, fail, in.Now, ready)
	}
	parent, ok, err := readRun(ctx, tx, in.RunID)
	if err != nil || !ok {
		return err
	}
	started := history.WorkflowStarted{
		WorkflowType: c.WorkflowType, WorkflowID: c.WorkflowID, Queue: c.Queue, Input: c.Input, Attempt: 1,
		Format: history.FormatTasks,
	}
	attrs, err := encodeEvent(started)
	if err != nil {
		return fmt.Errorf("start child workflow %q: %w", c.WorkflowID, err)
	}
	now := micros(in.Now)
	err = insertRun(ctx, tx, newRun{
		runID: c.RunID, workflowID: c.WorkflowID, workflowType: c.WorkflowType, queue: c.Queue, input: jsonText(c.Input),
		nextEventID: 2, trace: parent.trace, parentRunID: in.RunID, parentSeq: c.Seq, parentClosePolicy: c.ParentClosePolicy,
		createdAt: now, updatedAt: now,
	})
	if err != nil {
		return fmt.Errorf("start child workflow %q: %w", c.WorkflowID, err)
	}
	if err := insertEvents(ctx, tx, c.RunID, 1, []string{started.EventType()}, []string{attrs}, now); err != nil {
		return err
	}
	if _, err := readyTask(ctx, tx, c.RunID, c.Queue, now); err != nil {
		return err
	}
	ready.WorkflowQueues = append(ready.WorkflowQueues, c.Queue)
	return appendFamilyEvent(ctx, tx, in.RunID, history.ChildWorkflowStarted{Seq: c.Seq, RunID: c.RunID}, in.Now, ready)
}

// sendExternal appends an external request's event to its target's open
// run, then its outcome to the sending run: ExternalRequestCompleted, or
// ExternalRequestFailed if the target has no open run (or not the one the
// request names).
func sendExternal(ctx context.Context, tx *sql.Tx, in store.CommitWorkflowTaskParams, r store.ExternalRequest, ready *store.Ready) error {
	attrs, err := encodeEvent(r.Event)
	if err != nil {
		return fmt.Errorf("%s to workflow %q: %w", r.Event.EventType(), r.WorkflowID, err)
	}
	var outcome history.Attributes = history.ExternalRequestCompleted{Seq: r.Seq}
	found, err := signal(ctx, tx, store.SignalParams{WorkflowID: r.WorkflowID, RunID: r.RunID, Now: in.Now}, r.Event.EventType(), attrs, ready)
	switch {
	case err != nil:
		return err
	case !found:
		msg := "no run is open"
		if r.RunID != "" {
			msg = "run " + r.RunID + " is not open"
		}
		outcome = history.ExternalRequestFailed{Seq: r.Seq, Failure: history.Failure{Message: msg, Class: "not_found"}}
	}
	return appendFamilyEvent(ctx, tx, in.RunID, outcome, in.Now, ready)
}

// cancelWaitingSQL marks the task of a canceled activity whose workflow
// waits for it (WaitForCancellation) if an attempt holds a live claim on
// it; it then finishes, and its outcome is recorded as usual.
const cancelWaitingSQL = `
UPDATE durable_activity_tasks SET canceled = 1
WHERE run_id = @run_id AND seq = @seq AND locked_by IS NOT NULL AND locked_until > @now`

// cancelWaiting cancels an activity whose workflow waits for it to
// acknowledge: a running attempt is left to finish (its task marked
// canceled), and an activity no attempt runs is removed, with its
// ActivityFailed of class "canceled" appended at once.
func cancelWaiting(ctx context.Context, tx *sql.Tx, in store.CommitWorkflowTaskParams, seq int64, ready *store.Ready) error {
	n, err := affected(tx.ExecContext(ctx, cancelWaitingSQL, sql.Named("run_id", in.RunID), sql.Named("seq", seq),
		sql.Named("now", micros(in.Now))))
	if err != nil || n > 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, deleteSomeActivitiesSQL, sql.Named("run_id", in.RunID), sql.Named("seqs", jsonList([]int64{seq}))); err != nil {
		return fmt.Errorf("cancel activity seq %d: %w", seq, err)
	}
	failed := history.ActivityFailed{Seq: seq, Failure: history.Failure{Message: "canceled before an attempt ran it", Class: "canceled"}}
	return appendFamilyEvent(ctx, tx, in.RunID, failed, in.Now, ready)
}

// reportToParent appends a closed child's outcome to its parent.
func reportToParent(ctx context.Context, tx *sql.Tx, childRunID, parentRunID string, c *store.CloseRun, now time.Time, ready *store.Ready) error {
	child, ok, err := readRun(ctx, tx, childRunID)
	if err != nil || !ok {
		return err
	}
	var ev history.Attributes = history.ChildWorkflowCompleted{Seq: child.parentSeq, Result: c.Result}
	if c.Status != store.StatusCompleted {
		f := history.Failure{Message: c.Status, Class: c.Status}
		if c.Failure != nil {
			f = *c.Failure
		}
		ev = history.ChildWorkflowFailed{Seq: child.parentSeq, Failure: f}
	}
	return appendFamilyEvent(ctx, tx, parentRunID, ev, now, ready)
}

// openChildrenSQL lists the open children a closing parent must terminate
// or cancel.
const openChildrenSQL = `
SELECT run_id, coalesce(parent_close_policy, '') FROM durable_runs
WHERE parent_run_id = @parent AND status = 'running' AND coalesce(parent_close_policy, '') <> 'abandon'
ORDER BY run_id`

// closeChildren applies the parent-close policy of each open child: cancel
// appends a cancel request, anything else but abandon terminates it.
func closeChildren(ctx context.Context, tx *sql.Tx, parentRunID string, now time.Time, ready *store.Ready) error {
	type child struct{ runID, policy string }
	children, err := queryAll(ctx, tx, openChildrenSQL, func(rows *sql.Rows) (c child, err error) {
		err = rows.Scan(&c.runID, &c.policy)
		return c, err
	}, sql.Named("parent", parentRunID))
	if err != nil {
		return fmt.Errorf("list the open children of run %s: %w", parentRunID, err)
	}
	for _, c := range children {
		if c.policy == "cancel" {
			if err := appendFamilyEvent(ctx, tx, c.runID, history.WorkflowCancelRequested{Reason: "parent closed"}, now, ready); err != nil {
				return err
			}
			continue
		}
		if err := terminate(ctx, tx, c.runID, "parent closed", now); err != nil {
			return err
		}
	}
	return nil
}

// appendFamilyEvent appends ev to a run if it is running (appendEvent), and
// adds the queue of the task it made ready to ready.
func appendFamilyEvent(ctx context.Context, tx *sql.Tx, runID string, ev history.Attributes, now time.Time, ready *store.Ready) error {
	queue, err := appendEvent(ctx, tx, runID, ev, now)
	if err != nil {
		return err
	}
	if queue != "" {
		ready.WorkflowQueues = append(ready.WorkflowQueues, queue)
	}
	return nil
}
