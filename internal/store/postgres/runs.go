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

const createRunSQL = `
WITH run AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, trace_context, waiter,
        created_at, updated_at)
    VALUES (@run_id, @workflow_id, @workflow_type, @queue, 'running', @input, 2, nullif(@trace, ''), nullif(@waiter, ''),
        @now, @now)
    ON CONFLICT (workflow_id) WHERE status = 'running' DO NOTHING
    RETURNING run_id, queue
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, 1, @event_type, @event, @now FROM run
), task AS (
    -- With claim_as set the first task is claimed for the starting worker.
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after, locked_by, locked_until, token)
    SELECT run_id, queue, CASE WHEN @claim_as = '' THEN @run_after::timestamptz ELSE @until END,
        nullif(@claim_as, ''), CASE WHEN @claim_as = '' THEN NULL ELSE @until END,
        CASE WHEN @claim_as = '' THEN 0 ELSE nextval('durable_task_token') END
    FROM run
    RETURNING token
)
SELECT count(*), count(CASE WHEN @notify THEN pg_notify('durable', 'w:' || queue) END),
    coalesce((SELECT token FROM task), 0)
FROM run`

// createRunMany is createRunSQL for many starts at once (a manyStmt). Two
// starts of one workflow ID in it behave as one after the other: the
// second finds the first's run and inserts nothing.
var createRunMany = &manyStmt{
	sql: `
WITH inp AS (
    SELECT * FROM unnest(@run_id::uuid[], @workflow_id::text[], @workflow_type::text[], @queue::text[], @input::jsonb[],
        @trace::text[], @now::timestamptz[], @event_type::text[], @event::jsonb[], @claim_as::text[], @until::timestamptz[],
        @notify::bool[], @waiter::text[], @run_after::timestamptz[])
        WITH ORDINALITY AS i(run_id, workflow_id, workflow_type, queue, input, trace, now, event_type, event, claim_as,
            until, notify, waiter, run_after, ix)
), run AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, trace_context,
        waiter, created_at, updated_at)
    SELECT run_id, workflow_id, workflow_type, queue, 'running', input, 2, nullif(trace, ''), nullif(waiter, ''), now, now
    FROM inp ORDER BY ix
    ON CONFLICT (workflow_id) WHERE status = 'running' DO NOTHING
    RETURNING run_id
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT i.run_id, 1, i.event_type, i.event, i.now FROM run JOIN inp i ON i.run_id = run.run_id
), task AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after, locked_by, locked_until, token)
    SELECT i.run_id, i.queue, CASE WHEN i.claim_as = '' THEN i.run_after ELSE i.until END,
        nullif(i.claim_as, ''), CASE WHEN i.claim_as = '' THEN NULL ELSE i.until END,
        CASE WHEN i.claim_as = '' THEN 0 ELSE nextval('durable_task_token') END
    FROM run JOIN inp i ON i.run_id = run.run_id
    RETURNING run_id, token
)
SELECT i.ix, count(run.run_id),
    count(CASE WHEN i.notify AND run.run_id IS NOT NULL THEN pg_notify('durable', 'w:' || i.queue) END),
    coalesce(max(task.token), 0)
FROM inp i LEFT JOIN run ON run.run_id = i.run_id LEFT JOIN task ON task.run_id = i.run_id
GROUP BY i.ix ORDER BY i.ix`,
	scalars: []string{"run_id", "workflow_id", "workflow_type", "queue", "input", "trace", "now", "event_type", "event",
		"claim_as", "until", "notify", "waiter", "run_after"},
}

// createRunFirstSQL is createRunSQL for an eager start: the run comes with
// the events, activities and timers of its first workflow task, and no task.
const createRunFirstSQL = `
WITH run AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, processed_event_id,
        trace_context, waiter, created_at, updated_at)
    VALUES (@run_id, @workflow_id, @workflow_type, @queue, 'running', @input, 2 + cardinality(@types::text[]), 1,
        nullif(@trace, ''), nullif(@waiter, ''), @now, @now)
    ON CONFLICT (workflow_id) WHERE status = 'running' DO NOTHING
    RETURNING run_id, queue, 2::bigint AS first_id, @now::timestamptz AS at
), started AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, 1, @event_type, @event, @now FROM run
` + commitEventsCTE + commitActivitiesCTE + `), tmr AS (
    INSERT INTO durable_timers (run_id, seq, queue, fire_at)
    SELECT run.run_id, t.seq, run.queue, t.fire_at
    FROM run, unnest(@timer_seq::bigint[], @timer_at::timestamptz[]) AS t(seq, fire_at)
    RETURNING fire_at
)
SELECT (SELECT count(*) FROM run),
    (SELECT array_agg(queue) FROM acts WHERE run_after <= @now AND locked_by IS NULL),
    (SELECT array_agg(ARRAY[id, seq]) FROM acts WHERE locked_by IS NOT NULL),
    (SELECT min(fire_at) FROM tmr)`

// createRunFirstMany is createRunFirstSQL for many eager starts at once (a
// manyStmt). Two starts of one workflow ID in it behave as one after the
// other: the second finds the first's run and inserts nothing.
var createRunFirstMany = &manyStmt{
	sql: `
WITH inp AS (
    SELECT * FROM unnest(@run_id::uuid[], @workflow_id::text[], @workflow_type::text[], @queue::text[], @input::jsonb[],
        @trace::text[], @now::timestamptz[], @event_type::text[], @event::jsonb[], @n_events::int[], @waiter::text[])
        WITH ORDINALITY AS i(run_id, workflow_id, workflow_type, queue, input, trace, now, event_type, event, n, waiter, ix)
), ins AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, processed_event_id,
        trace_context, waiter, created_at, updated_at)
    SELECT run_id, workflow_id, workflow_type, queue, 'running', input, 2 + n, 1, nullif(trace, ''), nullif(waiter, ''),
        now, now
    FROM inp ORDER BY ix
    ON CONFLICT (workflow_id) WHERE status = 'running' DO NOTHING
    RETURNING run_id
), run AS (
    SELECT i.ix, i.run_id, i.queue, 2::bigint AS first_id, i.now, i.now AS at, i.event_type, i.event
    FROM ins JOIN inp i ON i.run_id = ins.run_id
), started AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, 1, event_type, event, now FROM run
` + manyEventsCTE + manyActivitiesCTE + `)
SELECT i.ix, (SELECT count(*) FROM run WHERE run.ix = i.ix),` + manyReadyColumns,
	scalars: []string{"run_id", "workflow_id", "workflow_type", "queue", "input", "trace", "now", "event_type", "event",
		"waiter"},
	lists: manyCommandLists,
}

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	started := in.Started()
	attrs, err := store.EncodeEvent(started)
	if err != nil {
		return store.Run{}, fmt.Errorf("create run of workflow %q: %w", in.WorkflowID, err)
	}
	if in.First != nil {
		return s.createRunFirst(ctx, in, started.EventType(), string(attrs))
	}
	var n, notes int
	var token int64
	// Starts made at once from many goroutines share statements and
	// commits (see Store.GroupStarts).
	err = s.startRun(ctx, in.WorkflowID, namedArgs{
		"notify":        in.Notify,
		"claim_as":      in.ClaimAs,
		"run_after":     laterOf(in.StartAt, in.Now),
		"until":         in.Now.Add(in.Lease),
		"trace":         in.TraceContext,
		"waiter":        in.Waiter,
		"run_id":        in.RunID,
		"workflow_id":   in.WorkflowID,
		"workflow_type": in.WorkflowType,
		"queue":         in.Queue,
		"input":         jsonArg(in.Input),
		"now":           in.Now,
		"event_type":    started.EventType(),
		"event":         string(attrs),
	}, scanInto(&n, &notes, &token))
	if err != nil {
		return store.Run{}, fmt.Errorf("create run: %w", translate(err))
	}
	if n == 0 {
		return s.openRunOf(ctx, in)
	}
	return store.Run{
		RunID:        in.RunID,
		WorkflowID:   in.WorkflowID,
		WorkflowType: in.WorkflowType,
		Queue:        in.Queue,
		Status:       store.StatusRunning,
		Input:        in.Input,
		CreatedAt:    in.Now,
		UpdatedAt:    in.Now,
		LastEventID:  1,
		Waiter:       in.Waiter,
		Token:        token,
	}, nil
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// openRunOf returns the open run that kept CreateRun from inserting, with
// ErrConflict, or creates the run if that one has closed meanwhile.
func (s *Store) openRunOf(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	existing, err := s.getRun(ctx, getOpenRunSQL, in.WorkflowID)
	if errors.Is(err, store.ErrNotFound) {
		// The open run closed between our insert and this read: its
		// workflow ID is free again, so try once more.
		return s.CreateRun(ctx, in)
	}
	if err != nil {
		return store.Run{}, err
	}
	return existing, store.ErrConflict
}

// createRunFirst is CreateRun with the first task's commands (in.First).
func (s *Store) createRunFirst(ctx context.Context, in store.CreateRunParams, eventType, event string) (store.Run, error) {
	f := *in.First
	if !f.IsFirst() || f.RunID != in.RunID {
		return store.Run{}, fmt.Errorf("create run %s: its first task may only append events, schedule activities and start timers, for the same run", in.RunID)
	}
	types, attrs, err := encodeEvents(f.Events)
	if err != nil {
		return store.Run{}, fmt.Errorf("create run %s: %w", in.RunID, err)
	}
	args := getCommitArgs()
	defer putCommitArgs(args)
	args["trace"], args["run_id"], args["workflow_id"], args["workflow_type"] = in.TraceContext, in.RunID, in.WorkflowID, in.WorkflowType
	args["queue"], args["input"], args["now"], args["event_type"], args["event"] = in.Queue, jsonArg(in.Input), in.Now, eventType, event
	args["waiter"] = in.Waiter
	args["types"], args["attrs"] = types, attrs
	activityArgs(args, f.Activities)
	timerArgs(args, f.Timers)
	var (
		n       int
		ready   store.Ready
		claimed claimedActivities
	)
	// Under load, eager starts share transactions like steps (group commit).
	err = s.queryRowMany(ctx, in.RunID, createRunFirstSQL, createRunFirstMany, args,
		scanInto(&n, &ready.ActivityQueues, &claimed, &ready.TimerAt))
	if err != nil {
		return store.Run{}, fmt.Errorf("create run: %w", translate(err))
	}
	if n == 0 {
		return s.openRunOf(ctx, in)
	}
	ready.FirstEventID = 2
	return store.Run{
		RunID: in.RunID, WorkflowID: in.WorkflowID, WorkflowType: in.WorkflowType, Queue: in.Queue,
		Status: store.StatusRunning, Input: in.Input, CreatedAt: in.Now, UpdatedAt: in.Now,
		LastEventID: 1 + int64(len(f.Events)), Waiter: in.Waiter, Ready: handedOff(f, ready, claimed),
	}, nil
}

// runOpen is the condition that the run r is open, in statements that find
// it by its ID. It is written so that no index can serve it: on a young
// table (planner statistics of a few rows) generic plans reached the run
// through durable_runs_status instead of the primary key, visiting every
// running run, so that a step's cost grew with the number of open runs
// (427 buffers per commit at 2,000 open runs). For the same reason those
// statements name the run by a parameter, not only through a join.
const runOpen = `(r.status = 'running') IS TRUE`

// runColumns reads a run and its workflow task, by key (LATERAL: as a
// join, a plan made on a nearly empty table walked the whole task table).
const runColumns = `
    r.run_id::text, r.workflow_id, r.workflow_type, r.queue, r.status, r.input, r.result, r.failure,
    r.created_at, r.updated_at, r.closed_at, r.next_event_id - 1,
    coalesce(t.last_error, ''), coalesce(t.attempts, 0), coalesce(r.waiter, ''),
    CASE WHEN r.processed_event_id = 0 AND t.token = 0 THEN t.run_after END -- a first task never claimed
FROM durable_runs r LEFT JOIN LATERAL (
    SELECT t.last_error, t.attempts, t.token, t.run_after FROM durable_workflow_tasks t WHERE t.run_id = r.run_id LIMIT 1
) t ON true`

const (
	getRunSQL     = `SELECT ` + runColumns + ` WHERE r.run_id = $1`
	getOpenRunSQL = `SELECT ` + runColumns + ` WHERE r.workflow_id = $1 AND r.status = 'running'`
	// getLatestSQL breaks ties of created_at (a frozen test clock starts a
	// continuation at the instant its predecessor closed) in favour of the
	// open run, then of a run that did not continue as new.
	getLatestSQL = `SELECT ` + runColumns + ` WHERE r.workflow_id = $1
ORDER BY r.created_at DESC, r.status = 'running' DESC, r.status = 'continued_as_new', r.run_id LIMIT 1`
)

// watchRunSQL marks an open run as waited for by engines besides its
// starter. Its row lock orders it with the run's close, which reads waiter
// in the same row: the close sees "*", or this sees the run closed.
const watchRunSQL = `UPDATE durable_runs SET waiter = '*' WHERE run_id = $1 AND status = 'running'`

// WatchRun implements store.Store.
func (s *Store) WatchRun(ctx context.Context, runID string) (bool, error) {
	tag, err := s.exec(ctx, watchRunSQL, runID)
	if err != nil {
		return false, fmt.Errorf("watch run %s: %w", runID, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

// GetRunByWorkflowID implements store.Store.
func (s *Store) GetRunByWorkflowID(ctx context.Context, workflowID string) (store.Run, error) {
	return s.getRun(ctx, getLatestSQL, workflowID)
}

func (s *Store) getRun(ctx context.Context, sql, arg string) (store.Run, error) {
	var r store.Run
	err := s.query(ctx, sql, func(rows pgx.Rows) (err error) {
		r, err = pgx.CollectExactlyOneRow(rows, scanRun)
		return err
	}, arg)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Run{}, store.ErrNotFound
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("get run: %w", err)
	}
	return r, nil
}

func scanRun(row pgx.CollectableRow) (store.Run, error) {
	var (
		r       store.Run
		failure []byte
	)
	err := row.Scan(&r.RunID, &r.WorkflowID, &r.WorkflowType, &r.Queue, &r.Status, &r.Input, &r.Result, &failure,
		&r.CreatedAt, &r.UpdatedAt, &r.ClosedAt, &r.LastEventID, &r.TaskError, &r.TaskAttempts, &r.Waiter,
		&r.FirstTaskAt)
	if err != nil {
		return r, err
	}
	if failure != nil {
		r.Failure = new(history.Failure)
		if err := json.Unmarshal(failure, r.Failure); err != nil {
			return r, fmt.Errorf("run %s: decode failure: %w", r.RunID, err)
		}
	}
	return r, nil
}

// jsonArg passes raw JSON to a jsonb parameter; nil becomes JSON null.
func jsonArg(b json.RawMessage) string {
	if len(b) == 0 {
		return "null"
	}
	return string(b)
}
