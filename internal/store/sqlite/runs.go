package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// newRun is a row of durable_runs to insert: a started run, a child, a
// continuation or a redriven run.
type newRun struct {
	runID, workflowID, workflowType, queue string
	input                                  string // JSON
	nextEventID, processedEventID          int64
	trace, waiter                          string
	parentRunID                            string
	parentSeq                              int64
	parentClosePolicy                      string
	createdAt, updatedAt                   int64
}

const insertRunSQL = `
INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, processed_event_id,
    trace_context, waiter, parent_run_id, parent_seq, parent_close_policy, created_at, updated_at)
VALUES (@run_id, @workflow_id, @workflow_type, @queue, 'running', @input, @next_event_id, @processed_event_id,
    @trace, @waiter, @parent_run_id, @parent_seq, @policy, @created_at, @updated_at)`

// insertRun inserts r, running. The caller has made sure that its workflow
// ID has no open run (openRunOf): the unique index would refuse it.
func insertRun(ctx context.Context, tx *sql.Tx, r newRun) error {
	var parentSeq any
	if r.parentRunID != "" {
		parentSeq = r.parentSeq
	}
	_, err := tx.ExecContext(ctx, insertRunSQL,
		sql.Named("run_id", r.runID), sql.Named("workflow_id", r.workflowID), sql.Named("workflow_type", r.workflowType),
		sql.Named("queue", r.queue), sql.Named("input", r.input), sql.Named("next_event_id", r.nextEventID),
		sql.Named("processed_event_id", r.processedEventID), sql.Named("trace", nullText(r.trace)),
		sql.Named("waiter", nullText(r.waiter)), sql.Named("parent_run_id", nullText(r.parentRunID)),
		sql.Named("parent_seq", parentSeq), sql.Named("policy", nullText(r.parentClosePolicy)),
		sql.Named("created_at", r.createdAt), sql.Named("updated_at", r.updatedAt))
	if err != nil {
		return fmt.Errorf("insert run %s: %w", r.runID, err)
	}
	return nil
}

// openRunOfSQL finds the open run of a workflow ID, and its parent.
const openRunOfSQL = `SELECT run_id, coalesce(parent_run_id, '') FROM durable_runs WHERE workflow_id = @workflow_id AND status = 'running'`

// openRunOf returns the open run of a workflow ID and its parent, or ""
// if the workflow ID has no open run.
func openRunOf(ctx context.Context, q querier, workflowID string) (runID, parentRunID string, err error) {
	err = q.QueryRowContext(ctx, openRunOfSQL, sql.Named("workflow_id", workflowID)).Scan(&runID, &parentRunID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("find the open run of workflow %q: %w", workflowID, err)
	}
	return runID, parentRunID, nil
}

// The workflow task a write makes for a run: ready at run_after, or, with
// locked_by set, claimed for that worker until locked_until (run_after is
// then locked_until too: see the schema). A run has at most one; a write
// that finds one leaves it as it is (it is ready already, or claimed by a
// worker that will see the new events when it commits).
const (
	insertTaskSQL = `
INSERT INTO durable_workflow_tasks (run_id, queue, run_after, locked_by, locked_until, token)
VALUES (@run_id, @queue, @run_after, @locked_by, @locked_until, @token)
ON CONFLICT (run_id) DO NOTHING`
	nextTokensSQL = `UPDATE durable_task_token SET value = value + @n WHERE one = 1 RETURNING value`
)

// nextTokens takes n claim tokens from the counter and returns the first:
// the tokens are first, first+1, ..., first+n-1.
func nextTokens(ctx context.Context, tx *sql.Tx, n int) (first int64, err error) {
	var last int64
	if err := tx.QueryRowContext(ctx, nextTokensSQL, sql.Named("n", n)).Scan(&last); err != nil {
		return 0, fmt.Errorf("take %d claim tokens: %w", n, err)
	}
	return last - int64(n) + 1, nil
}

// readyTask makes the run's workflow task ready at runAfter, unless it has
// one; it reports whether it made it.
func readyTask(ctx context.Context, tx *sql.Tx, runID, queue string, runAfter int64) (bool, error) {
	n, err := affected(tx.ExecContext(ctx, insertTaskSQL, sql.Named("run_id", runID), sql.Named("queue", queue),
		sql.Named("run_after", runAfter), sql.Named("locked_by", nil), sql.Named("locked_until", nil), sql.Named("token", 0)))
	if err != nil {
		return false, fmt.Errorf("make the workflow task of run %s: %w", runID, err)
	}
	return n == 1, nil
}

// claimedTask makes the run's workflow task claimed by worker until until,
// unless it has one; it returns the claim's token, or 0 if it made none.
func claimedTask(ctx context.Context, tx *sql.Tx, runID, queue, worker string, until int64) (token int64, err error) {
	token, err = nextTokens(ctx, tx, 1)
	if err != nil {
		return 0, err
	}
	n, err := affected(tx.ExecContext(ctx, insertTaskSQL, sql.Named("run_id", runID), sql.Named("queue", queue),
		sql.Named("run_after", until), sql.Named("locked_by", worker), sql.Named("locked_until", until), sql.Named("token", token)))
	if err != nil {
		return 0, fmt.Errorf("make the claimed workflow task of run %s: %w", runID, err)
	}
	if n == 0 {
		return 0, nil
	}
	return token, nil
}

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	started, err := encodeEvent(in.Started())
	if err != nil {
		return store.Run{}, fmt.Errorf("create run of workflow %q: %w", in.WorkflowID, err)
	}
	if err := errors.Join(checkRunID(in.RunID), checkText("workflow ID", in.WorkflowID, "workflow type", in.WorkflowType,
		"queue", in.Queue, "trace context", in.TraceContext, "waiter", in.Waiter, "worker ID", in.ClaimAs)); err != nil {
		return store.Run{}, fmt.Errorf("create run of workflow %q: %w", in.WorkflowID, err)
	}
	var firstEvents []string
	if f := in.First; f != nil {
		if !f.IsFirst() || f.RunID != in.RunID {
			return store.Run{}, fmt.Errorf("create run %s: its first task may only append events, schedule activities and start timers, for the same run", in.RunID)
		}
		if firstEvents, err = encodeEvents(f.Events); err == nil {
			err = checkActivities(f.Activities)
		}
		if err != nil {
			return store.Run{}, fmt.Errorf("create run %s: %w", in.RunID, err)
		}
	}

	var (
		run      store.Run
		conflict bool
	)
	now := micros(in.Now)
	err = s.write(ctx, func(tx *sql.Tx) error {
		if open, _, err := openRunOf(ctx, tx, in.WorkflowID); err != nil || open != "" {
			if err == nil {
				run, err = getRun(ctx, tx, getRunSQL, open)
				conflict = true
			}
			return err
		}
		r := newRun{
			runID: in.RunID, workflowID: in.WorkflowID, workflowType: in.WorkflowType, queue: in.Queue,
			input: jsonText(in.Input), nextEventID: 2, trace: in.TraceContext, waiter: in.Waiter,
			createdAt: now, updatedAt: now,
		}
		if in.First != nil {
			r.nextEventID, r.processedEventID = 2+int64(len(firstEvents)), 1
		}
		if err := insertRun(ctx, tx, r); err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, in.RunID, 1, []string{in.Started().EventType()}, []string{started}, now); err != nil {
			return err
		}
		run = store.Run{
			RunID: in.RunID, WorkflowID: in.WorkflowID, WorkflowType: in.WorkflowType, Queue: in.Queue,
			Status: store.StatusRunning, Input: in.Input, CreatedAt: fromMicros(now), UpdatedAt: fromMicros(now),
			LastEventID: r.nextEventID - 1, Waiter: in.Waiter,
		}
		switch {
		case in.First != nil:
			// An eager start: the first task ran, and its commands come
			// with the run, which has no workflow task.
			f := *in.First
			if err := insertEvents(ctx, tx, in.RunID, 2, eventTypes(f.Events), firstEvents, now); err != nil {
				return err
			}
			run.Ready.FirstEventID = 2
			return scheduleCommands(ctx, tx, in.RunID, in.Queue, f, &run.Ready)
		case in.ClaimAs != "":
			// A hand-off: the starter runs the first task under this claim.
			token, err := claimedTask(ctx, tx, in.RunID, in.Queue, in.ClaimAs, micros(in.Now.Add(in.Lease)))
			run.Token = token
			return err
		default:
			_, err := readyTask(ctx, tx, in.RunID, in.Queue, micros(laterOf(in.StartAt, in.Now)))
			return err
		}
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("create run %s of workflow %q: %w", in.RunID, in.WorkflowID, translate(err))
	}
	if conflict {
		return run, store.ErrConflict
	}
	if in.First != nil {
		run.Ready = handedOff(*in.First, run.Ready)
	} else if in.Notify {
		s.send([]store.Note{{Kind: store.NoteWorkflowTasks, Queue: in.Queue}})
	}
	return run, nil
}

// runColumns reads a run and its workflow task.
const runColumns = `
    r.run_id, r.workflow_id, r.workflow_type, r.queue, r.status, r.input, r.result, r.failure,
    r.created_at, r.updated_at, r.closed_at, r.next_event_id - 1,
    coalesce(t.last_error, ''), coalesce(t.attempts, 0), coalesce(r.waiter, ''),
    CASE WHEN r.processed_event_id = 0 AND t.token = 0 THEN t.run_after END -- a first task never claimed
FROM durable_runs r LEFT JOIN durable_workflow_tasks t ON t.run_id = r.run_id`

const (
	getRunSQL = `SELECT ` + runColumns + ` WHERE r.run_id = @key`
	// getLatestSQL breaks ties of created_at (a frozen test clock starts a
	// continuation at the instant its predecessor closed) in favour of the
	// open run, then of a run that did not continue as new.
	getLatestSQL = `SELECT ` + runColumns + ` WHERE r.workflow_id = @key
ORDER BY r.created_at DESC, r.status = 'running' DESC, r.status = 'continued_as_new', r.run_id LIMIT 1`
)

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, runID string) (store.Run, error) {
	return getRun(ctx, s.reader(), getRunSQL, runID)
}

// GetRunByWorkflowID implements store.Store.
func (s *Store) GetRunByWorkflowID(ctx context.Context, workflowID string) (store.Run, error) {
	return getRun(ctx, s.reader(), getLatestSQL, workflowID)
}

// getRun reads the run that query finds by key, or returns
// store.ErrNotFound.
func getRun(ctx context.Context, q querier, query, key string) (store.Run, error) {
	var (
		r                       store.Run
		failure                 []byte
		created, updated        int64
		closed, firstTaskAt     sql.NullInt64
		input, result           []byte
		lastEventID, taskErrors int64
	)
	err := q.QueryRowContext(ctx, query, sql.Named("key", key)).Scan(&r.RunID, &r.WorkflowID, &r.WorkflowType, &r.Queue,
		&r.Status, &input, &result, &failure, &created, &updated, &closed, &lastEventID, &r.TaskError, &taskErrors,
		&r.Waiter, &firstTaskAt)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, store.ErrNotFound
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("get run %s: %w", key, err)
	}
	r.Input, r.Result = input, result
	r.CreatedAt, r.UpdatedAt, r.ClosedAt = fromMicros(created), fromMicros(updated), nullTime(closed)
	r.LastEventID, r.TaskAttempts, r.FirstTaskAt = lastEventID, int(taskErrors), nullTime(firstTaskAt)
	if failure != nil {
		r.Failure = new(history.Failure)
		if err := json.Unmarshal(failure, r.Failure); err != nil {
			return store.Run{}, fmt.Errorf("run %s: decode its failure: %w", r.RunID, err)
		}
	}
	return r, nil
}

// watchRunSQL marks an open run as waited for by engines besides its
// starter. A close reads waiter in its own write transaction, after this
// one or before it: the close sees "*", or this sees the run closed.
const watchRunSQL = `UPDATE durable_runs SET waiter = '*' WHERE run_id = @run_id AND status = 'running'`

// WatchRun implements store.Store.
func (s *Store) WatchRun(ctx context.Context, runID string) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		n, err = affected(tx.ExecContext(ctx, watchRunSQL, sql.Named("run_id", runID)))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("watch run %s: %w", runID, err)
	}
	return n == 1, nil
}

// notRunningSQL returns those of the IDs (a JSON array) that name no
// running run.
const notRunningSQL = `
SELECT i.value FROM json_each(@ids) i
WHERE NOT EXISTS (SELECT 1 FROM durable_runs r WHERE r.run_id = i.value AND r.status = 'running')
ORDER BY i.key`

// NotRunning implements store.Store.
func (s *Store) NotRunning(ctx context.Context, runIDs []string) ([]string, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	gone, err := queryAll(ctx, s.reader(), notRunningSQL, func(rows *sql.Rows) (id string, err error) {
		err = rows.Scan(&id)
		return id, err
	}, sql.Named("ids", jsonList(runIDs)))
	if err != nil {
		return nil, fmt.Errorf("find runs not running among %d: %w", len(runIDs), err)
	}
	return gone, nil
}
