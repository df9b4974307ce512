package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// claimableWorkflowTasksSQL picks ready workflow tasks of a queue, oldest
// first, with what a claim returns of their runs. The write transaction
// that runs it holds the write lock, so the rows it picks are the claim's:
// no other claim runs until it commits.
const claimableWorkflowTasksSQL = `
SELECT t.run_id, r.workflow_id, r.workflow_type, t.queue, r.processed_event_id, t.attempts,
    coalesce(r.trace_context, ''), coalesce(r.parent_run_id, '')
FROM durable_workflow_tasks t JOIN durable_runs r ON r.run_id = t.run_id
WHERE t.queue = @queue AND t.run_after <= @now
  AND (@any_type OR r.workflow_type IN (SELECT value FROM json_each(@types)))
ORDER BY t.run_after, t.run_id
LIMIT @limit`

// claimWorkflowTaskSQL claims one task: the lease's end is its run_after,
// so that it is not ready again until the lease runs out.
const claimWorkflowTaskSQL = `
UPDATE durable_workflow_tasks SET locked_by = @worker, locked_until = @until, run_after = @until, token = @token
WHERE run_id = @run_id`

// ClaimWorkflowTasks implements store.Store. A claimed run whose first task
// it is (no workflow task has consumed an event) comes with its history,
// read in the claim's transaction.
func (s *Store) ClaimWorkflowTasks(ctx context.Context, in store.ClaimParams) ([]store.WorkflowTask, error) {
	if in.Limit <= 0 {
		return nil, nil
	}
	until := micros(in.Now.Add(in.Lease))
	var tasks []store.WorkflowTask
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		tasks, err = queryAll(ctx, tx, claimableWorkflowTasksSQL, func(rows *sql.Rows) (t store.WorkflowTask, err error) {
			err = rows.Scan(&t.RunID, &t.WorkflowID, &t.WorkflowType, &t.Queue, &t.ProcessedEventID, &t.Attempts,
				&t.TraceContext, &t.ParentRunID)
			return t, err
		}, sql.Named("queue", in.Queue), sql.Named("now", micros(in.Now)), sql.Named("any_type", in.Types == nil),
			sql.Named("types", jsonList(in.Types)), sql.Named("limit", in.Limit))
		if err != nil || len(tasks) == 0 {
			return err
		}
		token, err := nextTokens(ctx, tx, len(tasks))
		if err != nil {
			return err
		}
		for i := range tasks {
			t := &tasks[i]
			t.Token, t.LockedUntil = token+int64(i), fromMicros(until)
			if _, err := tx.ExecContext(ctx, claimWorkflowTaskSQL, sql.Named("worker", in.WorkerID), sql.Named("until", until),
				sql.Named("token", t.Token), sql.Named("run_id", t.RunID)); err != nil {
				return err
			}
			if t.ProcessedEventID == 0 {
				if t.Events, err = listEvents(ctx, tx, t.RunID, 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim workflow tasks on queue %q: %w", in.Queue, err)
	}
	return tasks, nil
}

// The statements of a workflow task's commit.
const (
	heldTaskSQL = `SELECT EXISTS (SELECT 1 FROM durable_workflow_tasks WHERE run_id = @run_id AND token = @token)`
	// commitRunSQL moves the run past the commit's events and, for a
	// close, closes it (a close without a result or failure keeps those
	// the run has).
	commitRunSQL = `
UPDATE durable_runs
SET next_event_id = next_event_id + @n, processed_event_id = @processed, updated_at = @at,
    status = coalesce(@status, status), result = coalesce(@result, result), failure = coalesce(@failure, failure),
    closed_at = CASE WHEN @status IS NULL THEN closed_at ELSE @at END
WHERE run_id = @run_id`
	// deadRunSQL keeps a failed run as a dead letter, to be redriven
	// after a fix.
	deadRunSQL = `
INSERT INTO durable_dead_letters (kind, type, queue, payload, run_id, workflow_id, attempts, last_error, error_class,
    first_failed_at, dead_lettered_at)
VALUES ('workflow', @type, @queue, @payload, @run_id, @workflow_id, 1, @error, @class, @now, @now)`
	deleteTimersSQL         = `DELETE FROM durable_timers WHERE run_id = @run_id`
	deleteSomeTimersSQL     = `DELETE FROM durable_timers WHERE run_id = @run_id AND seq IN (SELECT value FROM json_each(@seqs))`
	deleteActivityTasksSQL  = `DELETE FROM durable_activity_tasks WHERE run_id = @run_id`
	deleteSomeActivitiesSQL = `DELETE FROM durable_activity_tasks WHERE run_id = @run_id AND seq IN (SELECT value FROM json_each(@seqs))`
	deleteWorkflowTaskSQL   = `DELETE FROM durable_workflow_tasks WHERE run_id = @run_id`
	releaseCommittedTaskSQL = `
UPDATE durable_workflow_tasks
SET locked_by = NULL, locked_until = NULL, run_after = @now, attempts = 0, last_error = NULL, token = @token
WHERE run_id = @run_id`
)

// CommitWorkflowTask implements store.Store. The commit holds when its task
// still has the claim's token (and, with NextEventID, when the run has
// nothing after what the task read); it then appends the events after
// whatever the history holds, applies the commands, and deletes the task,
// or, if events arrived while the task ran, makes it ready again under a
// new token (the claim is done: its token must not write again).
func (s *Store) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	attrs, err := encodeEvents(in.Events)
	if err == nil {
		err = checkCommit(in)
	}
	if err != nil {
		return store.Ready{}, fmt.Errorf("commit workflow task of run %s: %w", in.RunID, err)
	}
	if in.Outcome != nil {
		return s.commitFused(ctx, in, attrs)
	}
	var (
		ready   store.Ready
		refused error
	)
	err = s.write(ctx, func(tx *sql.Tx) error {
		var held bool
		if err := tx.QueryRowContext(ctx, heldTaskSQL, sql.Named("run_id", in.RunID), sql.Named("token", in.Token)).Scan(&held); err != nil {
			return err
		}
		if !held {
			refused = store.ErrLeaseLost
			return nil
		}
		h, ok, err := readRun(ctx, tx, in.RunID)
		switch {
		case err != nil:
			return err
		case !ok || !h.running():
			refused = store.ErrLeaseLost
			return nil
		case in.NextEventID != 0 && h.nextEventID != in.NextEventID:
			// Events came after the history the task saw; the claim holds.
			refused = store.ErrRunMoved
			return nil
		}
		return commit(ctx, tx, in, h, attrs, &ready)
	})
	if err != nil {
		return store.Ready{}, fmt.Errorf("commit workflow task of run %s: %w", in.RunID, translate(err))
	}
	if refused != nil {
		return store.Ready{}, refused
	}
	return handedOff(in, ready), nil
}

// checkCommit refuses a commit whose names or payloads cannot be stored
// (see text.go), before anything is written.
func checkCommit(in store.CommitWorkflowTaskParams) error {
	errs := []error{checkActivities(in.Activities)}
	for _, c := range in.Children {
		errs = append(errs, checkRunID(c.RunID),
			checkText("child workflow ID", c.WorkflowID, "child workflow type", c.WorkflowType, "child queue", c.Queue,
				"parent-close policy", c.ParentClosePolicy),
			checkPayload(fmt.Sprintf("input of child workflow %q", c.WorkflowID), c.Input))
	}
	if n := in.ContinueAs; n != nil {
		errs = append(errs, checkRunID(n.RunID), checkPayload("input of the continuation", n.Input))
	}
	if c := in.Close; c != nil {
		errs = append(errs, checkPayload("result", c.Result))
	}
	for _, r := range in.External {
		errs = append(errs, checkText("workflow ID of an external request", r.WorkflowID, "run ID of an external request", r.RunID))
	}
	return errors.Join(errs...)
}

// commit applies a workflow task's commit to the run h, whose task the
// commit holds.
func commit(ctx context.Context, tx *sql.Tx, in store.CommitWorkflowTaskParams, h runHead, attrs []string, ready *store.Ready) error {
	first, at := h.nextEventID, h.eventTime(in.Now)
	ready.FirstEventID = first
	var status, result, failure any
	var failMessage, failClass string
	if c := in.Close; c != nil {
		status, result = c.Status, nullJSON(c.Result)
		if c.Failure != nil {
			// Escaped as every text the store writes: it goes to the run
			// and to a dead letter as well as to the closing event.
			f := store.EscapeFailure(*c.Failure)
			b, err := json.Marshal(f)
			if err != nil {
				return fmt.Errorf("encode the failure: %w", err)
			}
			failure, failMessage, failClass = string(b), f.Message, f.Class
		}
		ready.CloseWaiter = h.waiter
	}
	_, err := tx.ExecContext(ctx, commitRunSQL, sql.Named("n", len(in.Events)), sql.Named("processed", in.ProcessedEventID),
		sql.Named("at", at), sql.Named("status", status), sql.Named("result", result), sql.Named("failure", failure),
		sql.Named("run_id", in.RunID))
	if err != nil {
		return fmt.Errorf("update the run: %w", err)
	}
	if in.Close != nil && in.Close.Status == store.StatusFailed {
		_, err := tx.ExecContext(ctx, deadRunSQL, sql.Named("type", h.workflowType), sql.Named("queue", h.queue),
			sql.Named("payload", h.input), sql.Named("run_id", in.RunID), sql.Named("workflow_id", h.workflowID),
			sql.Named("error", failMessage), sql.Named("class", failClass), sql.Named("now", micros(in.Now)))
		if err != nil {
			return fmt.Errorf("keep the failed run as a dead letter: %w", err)
		}
	}
	if err := insertEvents(ctx, tx, in.RunID, first, eventTypes(in.Events), attrs, at); err != nil {
		return err
	}

	// What the commit removes, before what it adds (a close removes every
	// timer and activity task of the run, none of those it schedules).
	timers, acts := deleteSomeTimersSQL, deleteSomeActivitiesSQL
	if in.Close != nil {
		timers, acts = deleteTimersSQL, deleteActivityTasksSQL
	}
	if in.Close != nil || len(in.CanceledTimers) > 0 {
		if _, err := tx.ExecContext(ctx, timers, sql.Named("run_id", in.RunID), sql.Named("seqs", jsonList(in.CanceledTimers))); err != nil {
			return fmt.Errorf("delete timers: %w", err)
		}
	}
	if in.Close != nil || len(in.CanceledActivities) > 0 {
		// A closed run's pending activities have no one left to report
		// to; canceled ones neither.
		if _, err := tx.ExecContext(ctx, acts, sql.Named("run_id", in.RunID), sql.Named("seqs", jsonList(in.CanceledActivities))); err != nil {
			return fmt.Errorf("delete activity tasks: %w", err)
		}
	}
	if err := scheduleCommands(ctx, tx, in.RunID, h.queue, in, ready); err != nil {
		return err
	}
	if in.Close != nil && in.Close.Status == store.StatusContinuedAsNew && in.ContinueAs != nil {
		if err := continueAsNew(ctx, tx, h, *in.ContinueAs, in.Now, ready); err != nil {
			return err
		}
	}

	// The task: done if the run closed or the task consumed every event
	// (or its own, NextEventID); else ready again for what came meanwhile.
	if in.Close != nil || first == in.ProcessedEventID+1 || in.NextEventID != 0 {
		if _, err := tx.ExecContext(ctx, deleteWorkflowTaskSQL, sql.Named("run_id", in.RunID)); err != nil {
			return fmt.Errorf("delete the workflow task: %w", err)
		}
	} else {
		token, err := nextTokens(ctx, tx, 1)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, releaseCommittedTaskSQL, sql.Named("now", micros(in.Now)), sql.Named("token", token),
			sql.Named("run_id", in.RunID)); err != nil {
			return fmt.Errorf("make the workflow task ready again: %w", err)
		}
		ready.WorkflowQueues = append(ready.WorkflowQueues, h.queue)
	}
	return familyEffects(ctx, tx, in, ready)
}

// continueAsNew starts the run that continues h, with a new history: the
// same workflow ID, type, queue, trace, parent and waiter.
func continueAsNew(ctx context.Context, tx *sql.Tx, h runHead, next store.NewRun, now time.Time, ready *store.Ready) error {
	started := history.WorkflowStarted{
		WorkflowType: h.workflowType, WorkflowID: h.workflowID, Queue: h.queue, Input: next.Input, Attempt: 1,
		Format: history.FormatTasks,
	}
	attrs, err := encodeEvent(started)
	if err != nil {
		return fmt.Errorf("continue as new: %w", err)
	}
	at := micros(now)
	err = insertRun(ctx, tx, newRun{
		runID: next.RunID, workflowID: h.workflowID, workflowType: h.workflowType, queue: h.queue,
		input: jsonText(next.Input), nextEventID: 2, trace: h.trace, waiter: h.waiter,
		parentRunID: h.parentRunID, parentSeq: h.parentSeq, parentClosePolicy: h.parentClosePolicy,
		createdAt: at, updatedAt: at,
	})
	if err != nil {
		return err
	}
	if err := insertEvents(ctx, tx, next.RunID, 1, []string{started.EventType()}, []string{attrs}, at); err != nil {
		return err
	}
	if _, err := readyTask(ctx, tx, next.RunID, h.queue, at); err != nil {
		return err
	}
	ready.WorkflowQueues = append(ready.WorkflowQueues, h.queue)
	return nil
}

// The commands a commit (or an eager start, or a fused step) schedules.
const (
	// insertActivitySQL queues a run's activity, once: a second task for
	// the same seq is left out. One with locked_by set is claimed for that
	// worker at once (attempt 1), which runs it without a claim of its own.
	insertActivitySQL = `
INSERT INTO durable_activity_tasks (run_id, seq, activity, queue, input, idempotency_key, options, max_attempts, lease_ms,
    run_after, created_at, attempt, locked_by, locked_until)
VALUES (@run_id, @seq, @activity, @queue, @input, @key, @options, @max_attempts, @lease_ms,
    @run_after, @now, @attempt, @locked_by, @locked_until)
ON CONFLICT (run_id, seq) DO NOTHING`
	insertTimerSQL = `INSERT INTO durable_timers (run_id, seq, queue, fire_at) VALUES (@run_id, @seq, @queue, @fire_at)`
)

// scheduleCommands creates the activity tasks and timers of c for the run
// (on workflow queue queue), and says in ready what became ready: the
// queues of activities due now, the activities claimed for the committing
// worker, the earliest timer.
func scheduleCommands(ctx context.Context, tx *sql.Tx, runID, queue string, c store.CommitWorkflowTaskParams, ready *store.Ready) error {
	now := micros(c.Now)
	for _, a := range c.Activities {
		lease := a.Lease.Milliseconds()
		runAfter, attempt := micros(a.RunAfter), 0
		var lockedBy, lockedUntil any
		if a.ClaimAs != "" {
			runAfter, attempt = now+lease*1000, 1
			lockedBy, lockedUntil = a.ClaimAs, runAfter
		}
		res, err := tx.ExecContext(ctx, insertActivitySQL, sql.Named("run_id", runID), sql.Named("seq", a.Seq),
			sql.Named("activity", a.Activity), sql.Named("queue", a.Queue), sql.Named("input", jsonText(a.Input)),
			sql.Named("key", a.IdempotencyKey), sql.Named("options", jsonText(a.Options)), sql.Named("max_attempts", a.MaxAttempts),
			sql.Named("lease_ms", lease), sql.Named("run_after", runAfter), sql.Named("now", now), sql.Named("attempt", attempt),
			sql.Named("locked_by", lockedBy), sql.Named("locked_until", lockedUntil))
		n, err := affected(res, err)
		if err != nil {
			return fmt.Errorf("queue activity %s (seq %d): %w", a.Activity, a.Seq, err)
		}
		switch {
		case n == 0: // queued already
		case a.ClaimAs != "":
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			ready.ActivityTasks = append(ready.ActivityTasks, store.ActivityTask{
				ID: id, RunID: runID, WorkflowID: c.WorkflowID, WorkflowQueue: c.WorkflowQueue,
				Seq: a.Seq, Activity: a.Activity, Queue: a.Queue, Input: a.Input, IdempotencyKey: a.IdempotencyKey,
				Attempt: 1, MaxAttempts: a.MaxAttempts, Options: a.Options, LockedUntil: fromMicros(runAfter),
				ScheduledAt: fromMicros(now), TraceContext: c.TraceContext,
			})
		case runAfter <= now:
			ready.ActivityQueues = append(ready.ActivityQueues, a.Queue)
		}
	}
	for _, t := range c.Timers {
		fireAt := ceilMicros(t.FireAt)
		if _, err := tx.ExecContext(ctx, insertTimerSQL, sql.Named("run_id", runID), sql.Named("seq", t.Seq),
			sql.Named("queue", queue), sql.Named("fire_at", fireAt)); err != nil {
			return fmt.Errorf("start timer %d: %w", t.Seq, err)
		}
		if ready.TimerAt == nil || fireAt < micros(*ready.TimerAt) {
			at := fromMicros(fireAt)
			ready.TimerAt = &at
		}
	}
	return nil
}

// handedOff completes a commit's Ready: each queue named once, and the run
// it closed.
func handedOff(in store.CommitWorkflowTaskParams, ready store.Ready) store.Ready {
	ready.WorkflowQueues = distinct(ready.WorkflowQueues)
	ready.ActivityQueues = distinct(ready.ActivityQueues)
	if in.Close != nil {
		ready.ClosedRun, ready.Closed = in.RunID, in.Close
	}
	return ready
}

// distinct returns the names sorted, each once; nil for none.
func distinct(names []string) []string {
	if len(names) < 2 {
		return names
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

const failWorkflowTaskSQL = `
UPDATE durable_workflow_tasks
SET locked_by = NULL, locked_until = NULL, run_after = @run_after, attempts = attempts + 1, last_error = @error,
    token = @new_token
WHERE run_id = @run_id AND token = @token`

// FailWorkflowTask implements store.Store.
func (s *Store) FailWorkflowTask(ctx context.Context, in store.FailWorkflowTaskParams) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		token, err := nextTokens(ctx, tx, 1)
		if err != nil {
			return err
		}
		n, err = affected(tx.ExecContext(ctx, failWorkflowTaskSQL, sql.Named("run_after", micros(in.RunAfter)),
			sql.Named("error", store.EscapeText(in.Error)), sql.Named("new_token", token),
			sql.Named("run_id", in.RunID), sql.Named("token", in.Token)))
		return err
	})
	if err != nil {
		return fmt.Errorf("fail workflow task of run %s: %w", in.RunID, translate(err))
	}
	if n == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

const (
	heldByWorkerSQL = `SELECT run_id, queue FROM durable_workflow_tasks WHERE locked_by = @worker ORDER BY run_id`
	releaseTaskSQL  = `
UPDATE durable_workflow_tasks SET locked_by = NULL, locked_until = NULL, run_after = @now, token = @token
WHERE run_id = @run_id`
)

// ReleaseWorkflowTasks implements store.Store: each task the worker holds
// is ready again, under a new token, and its queue is announced.
func (s *Store) ReleaseWorkflowTasks(ctx context.Context, in store.ReleaseParams) error {
	var queues []string
	err := s.write(ctx, func(tx *sql.Tx) error {
		type held struct{ runID, queue string }
		tasks, err := queryAll(ctx, tx, heldByWorkerSQL, func(rows *sql.Rows) (h held, err error) {
			err = rows.Scan(&h.runID, &h.queue)
			return h, err
		}, sql.Named("worker", in.WorkerID))
		if err != nil || len(tasks) == 0 {
			return err
		}
		token, err := nextTokens(ctx, tx, len(tasks))
		if err != nil {
			return err
		}
		for i, t := range tasks {
			if _, err := tx.ExecContext(ctx, releaseTaskSQL, sql.Named("now", micros(in.Now)), sql.Named("token", token+int64(i)),
				sql.Named("run_id", t.runID)); err != nil {
				return err
			}
			queues = append(queues, t.queue)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release workflow tasks of worker %s: %w", in.WorkerID, err)
	}
	s.announce(store.NoteWorkflowTasks, queues)
	return nil
}
