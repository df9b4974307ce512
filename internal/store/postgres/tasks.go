package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

const claimWorkflowTasksSQL = `
WITH c AS (
    SELECT t.run_id FROM durable_workflow_tasks t
    WHERE t.queue = @queue AND t.run_after <= @now
      AND (@any_type OR EXISTS (SELECT 1 FROM durable_runs r WHERE r.run_id = t.run_id AND r.workflow_type = ANY(@types::text[])))
    ORDER BY t.run_after
    LIMIT @limit
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE durable_workflow_tasks t
SET locked_by = @worker, locked_until = @until, run_after = @until, token = nextval('durable_task_token')
FROM c, durable_runs r
WHERE t.run_id = c.run_id AND r.run_id = t.run_id
    AND t.run_id = ANY(ARRAY(SELECT run_id FROM c)) AND r.run_id = ANY(ARRAY(SELECT run_id FROM c))
RETURNING t.run_id::text, r.workflow_id, r.workflow_type, t.queue, t.token, r.processed_event_id, t.attempts,
    coalesce(r.trace_context, ''), coalesce(r.parent_run_id::text, '')`

// The claim statement returns no events on purpose. A row a claim locks
// may have been released by a commit that landed after the claim's
// snapshot was taken (Postgres then updates the newest version of the row),
// and anything else the statement reads, the run row and its events
// included, is from the older snapshot. A version that returned the run's
// new events from the claim statement handed one worker a history without
// the commit's events, and it appended them a second time (the chaos rig's
// long run caught it).
//
// claimedFirstHistoriesSQL reads them in a statement of its own instead,
// sent with the claim and run in its transaction after it: a statement
// takes a new snapshot, which holds every commit the claim waited for, and
// sees the claim's own updates, by which it finds the claimed tasks (their
// queue and run_after, in the index the claim used, and the worker). It
// reads the histories of the runs whose first task the claim took (no
// workflow task has consumed an event): runs started by a client, which no
// worker has cached. The worker reads the others itself, after the claim,
// from where its cache ends. The tasks are found in a subquery ordered by
// run_after, as the claim orders them: held off sorts, the planner then
// takes the index the claim used, where a plan made on empty tables could
// otherwise walk the tasks' primary key. The rows come in no order (an
// ORDER BY of events would do the same): scanHistories orders them.
const claimedFirstHistoriesSQL = `
SELECT e.run_id::text, e.event_id, e.type, e.attributes, e.created_at
FROM (
    SELECT t.run_id FROM durable_workflow_tasks t
    WHERE t.queue = @queue AND t.run_after = @until AND t.locked_by = @worker
    ORDER BY t.run_after
) t
JOIN durable_runs r ON r.run_id = t.run_id AND r.processed_event_id = 0
JOIN durable_events e ON e.run_id = t.run_id`

// ClaimWorkflowTasks implements store.Store. The claim and the read of the
// claimed first tasks' histories go in one round trip and transaction.
//
// That transaction does not wait for its commit to reach the disk
// (indexPlansNoFlush): on the path of every run started elsewhere, the wait
// is a WAL flush for a row lock. A claim lost in a Postgres crash loses
// nothing else: whatever committed after it in the WAL was lost too (a
// commit that waits for the disk flushes everything before it), so the
// history the claimer read is the history after the restart. The task is
// then ready again, and the worker that holds the lost claim may commit the
// task's commands all the same. Its token is fenced as any other: the row
// has its earlier token back, unless a new claim has taken it since. The
// token sequence may hand that claim the lost claim's number again (its
// advance may have been lost with it), and then the two workers hold the
// same token: the first to commit writes, from the same history and
// through the same fence as if it had held the claim alone, and its commit
// gives the task a new token, which refuses the other.
func (s *Store) ClaimWorkflowTasks(ctx context.Context, in store.ClaimParams) ([]store.WorkflowTask, error) {
	args := namedArgs{
		"queue":    in.Queue,
		"now":      in.Now,
		"limit":    in.Limit,
		"worker":   in.WorkerID,
		"until":    in.Now.Add(in.Lease),
		"any_type": in.Types == nil,
		"types":    arrayArg(in.Types),
	}
	var (
		tasks []store.WorkflowTask
		byRun map[string][]history.Event
	)
	err := s.runAllWith(ctx, indexPlansNoFlush, func(b *pgx.Batch) {
		b.Queue(claimWorkflowTasksSQL, args).Query(func(rows pgx.Rows) (err error) {
			tasks, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WorkflowTask, error) {
				var t store.WorkflowTask
				err := row.Scan(&t.RunID, &t.WorkflowID, &t.WorkflowType, &t.Queue, &t.Token, &t.ProcessedEventID, &t.Attempts, &t.TraceContext, &t.ParentRunID)
				return t, err
			})
			return err
		})
		b.Queue(claimedFirstHistoriesSQL, args).Query(func(rows pgx.Rows) (err error) {
			byRun, err = scanHistories(rows)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("claim workflow tasks on queue %q: %w", in.Queue, err)
	}
	for i := range tasks {
		tasks[i].Events = byRun[tasks[i].RunID]
		tasks[i].LockedUntil = in.Now.Add(in.Lease)
	}
	return tasks, nil
}

// eventTime is the time an append stamps its events with, and the run's
// updated_at after it: the writer's Now, but never before the run's last
// event (updated_at, which every append moves to its events' time), so
// that a history never goes back in time when its writers' clocks
// disagree a little. A statement that appends sets updated_at to it and
// returns it (RETURNING r.updated_at AS at) for its events.
const eventTime = `greatest(r.updated_at, @now)`

// The parts the commit statements share: lock the task row by its token,
// append the events after the run's last one (at the run's at: eventTime),
// create the activity tasks.
const (
	commitLockCTE = `
WITH lock AS (
    SELECT run_id FROM durable_workflow_tasks
    WHERE run_id = @run_id AND token = @token
    FOR UPDATE
)`
	commitEventsCTE = `
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run.run_id, run.first_id + e.ord - 1, e.type, e.attrs, run.at
    FROM run, unnest(@types::text[], @attrs::jsonb[]) WITH ORDINALITY AS e(type, attrs, ord)
`
	commitActivitiesCTE = `
), acts AS (
    -- An activity with claim_as set is claimed for that worker at once
    -- (attempt 1), which runs it without a claim of its own.
    INSERT INTO durable_activity_tasks (run_id, seq, activity, queue, input, idempotency_key, options, max_attempts,
        lease_ms, run_after, created_at, attempt, locked_by, locked_until)
    SELECT run.run_id, a.seq, a.activity, a.queue, a.input, a.key, a.options, a.max_attempts, a.lease_ms,
        CASE WHEN a.claim_as = '' THEN a.run_after ELSE @now + a.lease_ms * interval '1 millisecond' END,
        @now,
        CASE WHEN a.claim_as = '' THEN 0 ELSE 1 END,
        nullif(a.claim_as, ''),
        CASE WHEN a.claim_as = '' THEN NULL ELSE @now + a.lease_ms * interval '1 millisecond' END
    FROM run, unnest(@act_seq::bigint[], @act_name::text[], @act_queue::text[], @act_input::jsonb[], @act_key::text[],
                     @act_options::jsonb[], @act_max::int[], @act_lease::bigint[], @act_after::timestamptz[], @act_claim::text[])
         AS a(seq, activity, queue, input, key, options, max_attempts, lease_ms, run_after, claim_as)
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING id, seq, queue, run_after, locked_by, locked_until
`
)

// commitWorkflowTaskSQL does all of a workflow task's effects in one
// statement. It locks the task row first (so a claim cannot slip in), then
// the activity tasks it deletes (all of them if it closes the run, the
// canceled ones otherwise), then the run row, appends the events after
// whatever the history holds now, creates activity tasks and timers, and
// either deletes the task or, if events arrived while it ran, makes it
// ready again.
//
// That is the order lockOpenRun (Terminate) takes: workflow task, activity
// tasks by seq, run. An activity outcome deletes its task and then updates
// the run, so a commit that held the run while it waited for that task
// would deadlock with it; waiting for the task before the run, it cannot.
// Activity outcomes insert the workflow task with ON CONFLICT DO NOTHING,
// which does not wait for the lock this commit holds on it.
const commitWorkflowTaskSQL = commitLockCTE + `, acts_locked AS (
    -- The activity tasks cact deletes; a commit that deletes none (timers
    -- only) does not even look.
    SELECT a.id FROM durable_activity_tasks a, lock
    WHERE (@close_status::text IS NOT NULL OR cardinality(@canceled_acts::bigint[]) > 0)
      AND a.run_id = @run_id::uuid AND a.run_id = lock.run_id
      AND (@close_status::text IS NOT NULL OR a.seq = ANY(@canceled_acts::bigint[]))
    -- In the order of the run's index (run_id, seq), which a plan made on
    -- empty tables then takes; in id order, it walked the primary key,
    -- every task of every run. A run's tasks have ids in seq order.
    ORDER BY a.seq
    FOR UPDATE OF a
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + cardinality(@types::text[]),
        processed_event_id = @processed,
        updated_at = ` + eventTime + `,
        status = coalesce(@close_status, r.status),
        result = coalesce(@result::jsonb, r.result),
        failure = coalesce(@failure::jsonb, r.failure),
        closed_at = CASE WHEN @close_status::text IS NULL THEN NULL ELSE ` + eventTime + ` END
    FROM lock
    WHERE r.run_id = @run_id AND r.run_id = lock.run_id AND ` + runOpen + `
      -- A commit that carries events its task consumed takes effect only on
      -- the history that task saw (store.CommitWorkflowTaskParams.NextEventID).
      AND (@expect_next::bigint = 0 OR r.next_event_id = @expect_next)
      -- Always true; it makes the activity tasks locked before the run row
      -- (a condition on no row of the UPDATE, evaluated before its scan).
      AND (SELECT count(*) FROM acts_locked) >= 0
    RETURNING r.run_id, r.queue, r.workflow_id, r.workflow_type, r.input, r.trace_context,
        r.parent_run_id, r.parent_seq, r.parent_close_policy, r.waiter,
        r.next_event_id - cardinality(@types::text[]) AS first_id, r.updated_at AS at
), dead AS (
    -- A failed run is kept as a dead letter, to be redriven after a fix.
    INSERT INTO durable_dead_letters (kind, type, queue, payload, run_id, workflow_id, attempts, last_error,
        error_class, first_failed_at, dead_lettered_at)
    SELECT 'workflow', workflow_type, queue, input, run_id, workflow_id, 1, @fail_message, @fail_class, @now, @now
    FROM run
    WHERE @close_status::text = 'failed'
` + commitEventsCTE + `` + commitActivitiesCTE + `), tmr AS (
    INSERT INTO durable_timers (run_id, seq, queue, fire_at)
    SELECT run.run_id, t.seq, run.queue, t.fire_at
    FROM run, unnest(@timer_seq::bigint[], @timer_at::timestamptz[]) AS t(seq, fire_at)
    RETURNING fire_at
), ctm AS (
    -- The run named outright here too, for the plan (see acts_locked).
    DELETE FROM durable_timers d USING run
    WHERE d.run_id = @run_id::uuid AND d.run_id = run.run_id
      AND (d.seq = ANY(@canceled::bigint[]) OR @close_status::text IS NOT NULL)
), cact AS (
    -- A closed run's pending activities have no one left to report to;
    -- canceled ones neither.
    DELETE FROM durable_activity_tasks a USING run
    WHERE a.run_id = @run_id::uuid AND a.run_id = run.run_id
      AND (@close_status::text IS NOT NULL OR a.seq = ANY(@canceled_acts::bigint[]))
), next_run AS (
    -- Continue-as-new: the next run of the workflow ID, with a new history.
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id, trace_context,
        parent_run_id, parent_seq, parent_close_policy, waiter, created_at, updated_at)
    SELECT @next_run_id::uuid, workflow_id, workflow_type, queue, 'running', @next_input::jsonb, 2, trace_context,
        parent_run_id, parent_seq, parent_close_policy, waiter, @now, @now
    FROM run WHERE @close_status::text = 'continued_as_new'
    RETURNING run_id, queue, workflow_id, workflow_type
), next_ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT run_id, 1, 'workflow_started', jsonb_build_object('workflow_type', workflow_type, 'workflow_id', workflow_id,
        'queue', queue, 'input', @next_input::jsonb, 'attempt', 1, 'format', 1), @now -- history.FormatTasks
    FROM next_run
), next_task AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after)
    SELECT run_id, queue, @now FROM next_run
    RETURNING queue
), del AS (
    DELETE FROM durable_workflow_tasks t USING run
    WHERE t.run_id = run.run_id
      AND (@close_status::text IS NOT NULL OR run.first_id = @processed + 1 OR @expect_next::bigint <> 0)
), rel AS (
    UPDATE durable_workflow_tasks t
    SET locked_by = NULL, locked_until = NULL, run_after = @now, attempts = 0, last_error = NULL,
        token = nextval('durable_task_token') -- this claim is done: its token must not write again
    FROM run
    WHERE t.run_id = run.run_id AND @close_status::text IS NULL AND run.first_id <> @processed + 1
      AND @expect_next::bigint = 0
    RETURNING t.queue
)
SELECT (SELECT count(*) FROM run), (SELECT first_id FROM run),
    (SELECT array_agg(queue) FROM acts WHERE run_after <= @now AND locked_by IS NULL),
    (SELECT array_agg(ARRAY[id, seq]) FROM acts WHERE locked_by IS NOT NULL),
    coalesce((SELECT queue FROM rel), (SELECT queue FROM next_task)),
    (SELECT min(fire_at) FROM tmr), coalesce((SELECT waiter FROM run), '')`

// commitStepSQL is commitWorkflowTaskSQL for the common step: events and
// activities only (no timers, cancellations or close). Each CTE costs
// Postgres planning and execution even when it has nothing to do.
const commitStepSQL = commitLockCTE + `, run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + cardinality(@types::text[]),
        processed_event_id = @processed,
        updated_at = ` + eventTime + `
    FROM lock
    WHERE r.run_id = @run_id AND r.run_id = lock.run_id AND ` + runOpen + `
      AND (@expect_next::bigint = 0 OR r.next_event_id = @expect_next)
    RETURNING r.run_id, r.queue, r.next_event_id - cardinality(@types::text[]) AS first_id, r.updated_at AS at
` + commitEventsCTE + `` + commitActivitiesCTE + `), del AS (
    DELETE FROM durable_workflow_tasks t USING run
    WHERE t.run_id = run.run_id AND (run.first_id = @processed + 1 OR @expect_next::bigint <> 0)
), rel AS (
    UPDATE durable_workflow_tasks t
    SET locked_by = NULL, locked_until = NULL, run_after = @now, attempts = 0, last_error = NULL,
        token = nextval('durable_task_token')
    FROM run
    WHERE t.run_id = run.run_id AND run.first_id <> @processed + 1 AND @expect_next::bigint = 0
    RETURNING t.queue
)
SELECT (SELECT count(*) FROM run), (SELECT first_id FROM run),
    (SELECT array_agg(queue) FROM acts WHERE run_after <= @now AND locked_by IS NULL),
    (SELECT array_agg(ARRAY[id, seq]) FROM acts WHERE locked_by IS NOT NULL),
    (SELECT queue FROM rel),
    NULL::timestamptz, ''::text`

// timerArgs sets the arguments of the timers a commit starts.
func timerArgs(args namedArgs, timers []store.NewTimer) {
	tseq, tat := make([]int64, len(timers)), make([]time.Time, len(timers))
	for i, t := range timers {
		tseq[i], tat[i] = t.Seq, ceilMicrosecond(t.FireAt)
	}
	args["timer_seq"], args["timer_at"] = tseq, tat
}

// ceilMicrosecond rounds t up to Postgres's precision. Stored truncated, a
// fire time of 12:00:00.0000005 would read as 12:00:00.000000, and a scan at
// that instant would fire the timer half a microsecond early (the chaos
// rig's long run caught four such fires among 56,111).
func ceilMicrosecond(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

// commitArgs is the most arguments a commit statement takes.
const commitArgs = 48

// commitArgsPool holds the argument maps of commits and eager starts. Sized
// for commitArgs, each was a tenth of the bytes the engine allocated in W1.
// A map goes back when its write has returned: by then the statement (or
// the group's, which merged it) has run and nothing refers to it.
var commitArgsPool = sync.Pool{New: func() any { return make(namedArgs, commitArgs) }}

func getCommitArgs() namedArgs { return commitArgsPool.Get().(namedArgs) }

func putCommitArgs(a namedArgs) {
	clear(a)
	commitArgsPool.Put(a)
}

// commitStepMany is commitStepSQL for many runs at once (a manyStmt): the
// same locks in the same order (the workflow tasks, in write order, then
// the runs), the same fence per run, one row per write.
var commitStepMany = &manyStmt{
	sql: `
WITH inp AS (
    SELECT * FROM unnest(@run_id::uuid[], @token::bigint[], @processed::bigint[], @now::timestamptz[], @n_events::int[],
        @expect_next::bigint[])
        WITH ORDINALITY AS i(run_id, token, processed, now, n, expect_next, ix)
), lock AS (
    SELECT i.ix, t.run_id FROM (SELECT * FROM inp ORDER BY ix) i
    CROSS JOIN LATERAL (
        SELECT t.run_id FROM durable_workflow_tasks t WHERE t.run_id = i.run_id AND t.token = i.token
        FOR UPDATE
    ) t
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + i.n, processed_event_id = i.processed, updated_at = greatest(r.updated_at, i.now)
    FROM lock JOIN inp i ON i.ix = lock.ix
    WHERE r.run_id = lock.run_id AND ` + runOpen + ` AND r.run_id = ANY(@run_id::uuid[])
      AND (i.expect_next = 0 OR r.next_event_id = i.expect_next)
    RETURNING i.ix, r.run_id, r.queue, r.next_event_id - i.n AS first_id, i.now, r.updated_at AS at, i.processed, i.expect_next
` + manyEventsCTE + manyActivitiesCTE + `), del AS (
    DELETE FROM durable_workflow_tasks t USING run
    WHERE t.run_id = run.run_id AND (run.first_id = run.processed + 1 OR run.expect_next <> 0)
      AND t.run_id = ANY(@run_id::uuid[])
), rel AS (
    UPDATE durable_workflow_tasks t
    SET locked_by = NULL, locked_until = NULL, run_after = run.now, attempts = 0, last_error = NULL,
        token = nextval('durable_task_token')
    FROM run
    WHERE t.run_id = run.run_id AND run.first_id <> run.processed + 1 AND run.expect_next = 0
      AND t.run_id = ANY(@run_id::uuid[])
    RETURNING t.run_id, t.queue
)
SELECT i.ix, (SELECT count(*) FROM run WHERE run.ix = i.ix), (SELECT first_id FROM run WHERE run.ix = i.ix),` +
		manyActivityColumns + `,
    (SELECT queue FROM rel WHERE rel.run_id = i.run_id),
    NULL::timestamptz, ''::text
FROM inp i ORDER BY i.ix`,
	scalars: []string{"run_id", "token", "processed", "now", "expect_next"},
	lists:   manyCommandLists,
}

// CommitWorkflowTask implements store.Store.
func (s *Store) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	var ready store.Ready
	types, attrs, err := encodeEvents(in.Events)
	if err != nil {
		return ready, fmt.Errorf("commit workflow task of run %s: %w", in.RunID, err)
	}
	// Sized for every argument the statements take (activityArgs and
	// timerArgs included): growing the map was a seventh of the engine's
	// allocations in W1; allocating it, a tenth of the bytes (the pool).
	args := getCommitArgs()
	defer putCommitArgs(args)
	args["run_id"], args["token"], args["processed"], args["now"] = in.RunID, in.Token, in.ProcessedEventID, in.Now
	args["expect_next"] = in.NextEventID
	args["types"], args["attrs"], args["canceled"] = types, attrs, in.CanceledTimers
	if in.CanceledTimers == nil {
		args["canceled"] = []int64{}
	}
	args["canceled_acts"] = in.CanceledActivities
	if in.CanceledActivities == nil {
		args["canceled_acts"] = []int64{}
	}
	args["next_run_id"], args["next_input"] = nil, nil
	if n := in.ContinueAs; n != nil {
		args["next_run_id"], args["next_input"] = n.RunID, jsonArg(n.Input)
	}
	args["close_status"], args["result"], args["failure"], args["fail_message"], args["fail_class"] = nil, nil, nil, "", ""
	if c := in.Close; c != nil {
		args["close_status"] = c.Status
		if c.Result != nil {
			args["result"] = string(c.Result)
		}
		if c.Failure != nil {
			// Escaped as every text the store writes: it goes to the run
			// and to a dead letter as well as to the closing event.
			f := store.EscapeFailure(*c.Failure)
			b, err := json.Marshal(f)
			if err != nil {
				return ready, fmt.Errorf("commit workflow task of run %s: encode failure: %w", in.RunID, err)
			}
			args["failure"] = string(b)
			args["fail_message"], args["fail_class"] = f.Message, f.Class
		}
	}
	activityArgs(args, in.Activities)
	timerArgs(args, in.Timers)

	if in.Outcome != nil {
		claimed, err := s.commitFused(ctx, in, args, &ready)
		if err != nil {
			return ready, err
		}
		return handedOff(in, ready, claimed), nil
	}
	var (
		ok       int
		released *string
		claimed  claimedActivities
		first    *int64
	)
	scan := scanInto(&ok, &first, &ready.ActivityQueues, &claimed, &released, &ready.TimerAt, &ready.CloseWaiter)
	if len(in.Children) > 0 || len(in.External) > 0 || len(in.WaitCanceledActivities) > 0 ||
		(in.Close != nil && (in.ParentRunID != "" || in.CloseChildren)) {
		// Children and parents: more than one statement, in one transaction.
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			if err := lockParentFirst(ctx, tx, in); err != nil {
				return err
			}
			if err := scan(tx.QueryRow(ctx, commitWorkflowTaskSQL, args)); err != nil || ok == 0 {
				return err
			}
			return s.in(tx).familyEffects(ctx, in, &ready)
		})
	} else {
		sql, many := commitWorkflowTaskSQL, (*manyStmt)(nil)
		if in.IsStep() {
			sql, many = commitStepSQL, commitStepMany
		}
		err = s.queryRowMany(ctx, in.RunID, sql, many, args, scan)
	}
	if err != nil {
		return ready, fmt.Errorf("commit workflow task of run %s: %w", in.RunID, translate(err))
	}
	if ok == 0 {
		return ready, s.refused(ctx, in)
	}
	if released != nil {
		ready.WorkflowQueues = []string{*released}
	}
	if first != nil {
		ready.FirstEventID = *first
	}
	return handedOff(in, ready, claimed), nil
}

// refused tells why a commit took no effect: ErrRunMoved if it required
// the history its task saw (NextEventID) and the task is still its own,
// else ErrLeaseLost.
func (s *Store) refused(ctx context.Context, in store.CommitWorkflowTaskParams) error {
	if in.NextEventID == 0 {
		return store.ErrLeaseLost
	}
	var held bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM durable_workflow_tasks WHERE run_id = $1 AND token = $2)`,
		in.RunID, in.Token).Scan(&held)
	switch {
	case err != nil:
		return fmt.Errorf("commit workflow task of run %s: refused; look up its claim: %w", in.RunID, translate(err))
	case held:
		return store.ErrRunMoved
	}
	return store.ErrLeaseLost
}

// handedOff completes a commit's Ready with the activity tasks it claimed
// for its worker and the run it closed.
//
// It also makes ready.ActivityQueues distinct. The statements list a queue
// once per activity: array_agg(DISTINCT) sorts for every write, about 4
// microseconds of Postgres's time each (docs/performance.md, history, 2026-12-01 at 8676bcc).
func handedOff(in store.CommitWorkflowTaskParams, ready store.Ready, claimed claimedActivities) store.Ready {
	if len(ready.ActivityQueues) > 1 {
		slices.Sort(ready.ActivityQueues)
		ready.ActivityQueues = slices.Compact(ready.ActivityQueues)
	}
	now := in.Now.Truncate(time.Microsecond) // as Postgres stores it
	for i := 0; i+1 < len(claimed); i += 2 {
		id, seq := claimed[i], claimed[i+1]
		for _, a := range in.Activities {
			if a.Seq != seq {
				continue
			}
			ready.ActivityTasks = append(ready.ActivityTasks, store.ActivityTask{
				ID: id, RunID: in.RunID, WorkflowID: in.WorkflowID, WorkflowQueue: in.WorkflowQueue,
				Seq: a.Seq, Activity: a.Activity, Queue: a.Queue, Input: a.Input, IdempotencyKey: a.IdempotencyKey,
				Attempt: 1, MaxAttempts: a.MaxAttempts, Options: a.Options, ScheduledAt: in.Now, TraceContext: in.TraceContext,
				LockedUntil: now.Add(a.Lease.Truncate(time.Millisecond)), // the statement's lease_ms
			})
		}
	}
	if in.Close != nil {
		ready.ClosedRun, ready.Closed = in.RunID, in.Close
	}
	return ready
}

const failWorkflowTaskSQL = `
UPDATE durable_workflow_tasks
SET locked_by = NULL, locked_until = NULL, run_after = @run_after, attempts = attempts + 1, last_error = @error,
    token = nextval('durable_task_token')
WHERE run_id = @run_id AND token = @token`

// FailWorkflowTask implements store.Store.
func (s *Store) FailWorkflowTask(ctx context.Context, in store.FailWorkflowTaskParams) error {
	tag, err := s.exec(ctx, failWorkflowTaskSQL, namedArgs{
		"run_id": in.RunID, "token": in.Token, "run_after": in.RunAfter, "error": store.EscapeText(in.Error),
	})
	if err != nil {
		return fmt.Errorf("fail workflow task of run %s: %w", in.RunID, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

const releaseWorkflowTasksSQL = `
WITH rel AS (
    UPDATE durable_workflow_tasks
    SET locked_by = NULL, locked_until = NULL, run_after = @now, token = nextval('durable_task_token')
    WHERE locked_by = @worker
    RETURNING queue
)
SELECT count(pg_notify('durable', 'w:' || queue)) FROM (SELECT DISTINCT queue FROM rel) q`

// ReleaseWorkflowTasks implements store.Store.
func (s *Store) ReleaseWorkflowTasks(ctx context.Context, in store.ReleaseParams) error {
	var n int
	if err := s.db.QueryRow(ctx, releaseWorkflowTasksSQL, namedArgs{"worker": in.WorkerID, "now": in.Now}).Scan(&n); err != nil {
		return fmt.Errorf("release workflow tasks of worker %s: %w", in.WorkerID, err)
	}
	return nil
}

// activityArgs sets the arguments of commitActivitiesCTE.
func activityArgs(args namedArgs, acts []store.NewActivityTask) {
	n := len(acts)
	seq, name, queue, input, key, opts := make([]int64, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	maxAttempts, lease, after, claim := make([]int32, n), make([]int64, n), make([]time.Time, n), make([]string, n)
	for i, a := range acts {
		seq[i], name[i], queue[i], input[i], key[i] = a.Seq, a.Activity, a.Queue, jsonArg(a.Input), a.IdempotencyKey
		opts[i], maxAttempts[i], lease[i], after[i], claim[i] = jsonArg(a.Options), int32(a.MaxAttempts), a.Lease.Milliseconds(), a.RunAfter, a.ClaimAs
	}
	args["act_claim"] = claim
	args["act_seq"], args["act_name"], args["act_queue"], args["act_input"], args["act_key"] = seq, name, queue, input, key
	args["act_options"], args["act_max"], args["act_lease"], args["act_after"] = opts, maxAttempts, lease, after
}

// claimedActivities are the activity tasks a commit claimed for its worker:
// pairs of task ID and seq, read flat from a two-dimensional array. It was
// JSON (with the lease's end), and decoding it was 3% of the engine's CPU in
// the W1 benchmark; the end of the lease is the commit's time plus the
// activity's lease, as the statement computes it.
type claimedActivities = pgtype.FlatArray[int64]

// arrayArg passes a list of names or IDs; nil becomes an empty array.
func arrayArg(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}
