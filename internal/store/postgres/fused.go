package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/store"
)

// A fused step records an activity's outcome, or a timer's firing, and the
// run's next workflow task in one statement
// (CommitWorkflowTaskParams.Outcome). There is no workflow task row to
// fence the write: the run's next event ID is the fence, since every write
// that adds to a run's history moves it (a timer fired by a scanner
// appends its TimerFired). The statement locks the activity task (its
// claim's fence), then the run, the order an outcome takes; a timer's step
// locks the run, then the timer, the order a fire takes. If a fence fails
// it changes nothing and says which.

// The first lock of a fused step: the activity task (its claim's fence).
// A timer's step reads its timer without a lock, and locks the run first,
// the order a fire takes: the timer must still be there (a timer canceled
// or fired meanwhile is gone), and whoever deleted it since this
// statement's snapshot moved the run on, which the run's fence sees.
const (
	fusedActivityLockSQL = `
WITH act AS (
    SELECT run_id FROM durable_activity_tasks
    WHERE id = @act_id AND attempt = @act_attempt AND run_id = @run_id
    FOR UPDATE
)`
	fusedTimerLockSQL = `
WITH act AS (
    SELECT run_id FROM durable_timers WHERE run_id = @run_id AND seq = @fired_seq
)`
)

const fusedRunSQL = `, run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + cardinality(@types::text[]),
        processed_event_id = @processed,
        updated_at = ` + eventTime

const fusedRunTailSQL = `
    FROM act
    WHERE r.run_id = @run_id AND r.run_id = act.run_id AND ` + runOpen + ` AND r.next_event_id = @processed`

const fusedReturningSQL = `
    RETURNING r.run_id, r.queue, r.next_event_id - cardinality(@types::text[]) AS first_id, r.waiter, r.updated_at AS at`

// What a fused step consumes: the activity task, or the fired timer (every
// timer of a run that closes).
const (
	fusedActivityDoneSQL = `
), done AS (
    DELETE FROM durable_activity_tasks a USING run WHERE a.id = @act_id
`
	fusedTimerDoneSQL = `
), done AS (
    DELETE FROM durable_timers d USING run WHERE d.run_id = run.run_id AND d.seq = @fired_seq
`
	fusedTimersDoneSQL = `
), done AS (
    DELETE FROM durable_timers d USING run WHERE d.run_id = run.run_id
`
)

// fusedStepSQL: the outcome, the task's events, the activities it
// schedules (claimed for the worker where asked) and the timers it starts.
// fusedCloseSQL: the outcome and the run's completion. The run must have
// no other activity task (the engine fuses only a run that waits on
// nothing else); if it has one, the run's fence fails and the close takes
// the general statement, which deletes it in lock order. Its timers go.
// Each comes for an activity outcome [0] and for a timer [1].
var (
	fusedStepSQL  = [2]string{fusedStepActivitySQL, fusedStepTimerSQL}
	fusedCloseSQL = [2]string{fusedCloseActivitySQL, fusedCloseTimerSQL}
)

const (
	fusedStepTailSQL = commitEventsCTE + commitActivitiesCTE + `), tmr AS (
    INSERT INTO durable_timers (run_id, seq, queue, fire_at)
    SELECT run.run_id, t.seq, run.queue, t.fire_at
    FROM run, unnest(@timer_seq::bigint[], @timer_at::timestamptz[]) AS t(seq, fire_at)
    RETURNING fire_at
)
SELECT (SELECT count(*) FROM act), (SELECT count(*) FROM run), (SELECT first_id FROM run),
    (SELECT array_agg(queue) FROM acts WHERE run_after <= @now AND locked_by IS NULL),
    (SELECT array_agg(ARRAY[id, seq]) FROM acts WHERE locked_by IS NOT NULL),
    (SELECT min(fire_at) FROM tmr)`
	fusedCloseRunSQL = `,
        status = 'completed', result = @result::jsonb, closed_at = ` + eventTime
	fusedCloseTailSQL = `
      AND NOT EXISTS (SELECT 1 FROM durable_activity_tasks o WHERE o.run_id = r.run_id AND o.id <> @act_id)`
	fusedCloseSelectSQL = `)
SELECT (SELECT count(*) FROM act), (SELECT count(*) FROM run), (SELECT first_id FROM run),
    NULL::text[], NULL::json, NULL::timestamptz, coalesce((SELECT waiter FROM run), '')`
	fusedStepActivitySQL  = fusedActivityLockSQL + fusedRunSQL + fusedRunTailSQL + fusedReturningSQL + fusedActivityDoneSQL + fusedStepTailSQL
	fusedStepTimerSQL     = fusedTimerLockSQL + fusedRunSQL + fusedRunTailSQL + fusedReturningSQL + fusedTimerDoneSQL + fusedStepTailSQL
	fusedCloseActivitySQL = fusedActivityLockSQL + fusedRunSQL + fusedCloseRunSQL + fusedRunTailSQL + fusedCloseTailSQL + fusedReturningSQL +
		fusedActivityDoneSQL + commitEventsCTE + `), ctm AS (
    DELETE FROM durable_timers d USING run WHERE d.run_id = run.run_id` + fusedCloseSelectSQL
	fusedCloseTimerSQL = fusedTimerLockSQL + fusedRunSQL + fusedCloseRunSQL + fusedRunTailSQL + fusedCloseTailSQL + fusedReturningSQL +
		fusedTimersDoneSQL + commitEventsCTE + fusedCloseSelectSQL
)

// commitFused runs a fused step. args are CommitWorkflowTask's.
func (s *Store) commitFused(ctx context.Context, in store.CommitWorkflowTaskParams, args namedArgs, ready *store.Ready) (claimedActivities, error) {
	if !in.Fusable() {
		return nil, fmt.Errorf("commit workflow task of run %s: an outcome cannot be fused with this commit (cancellations, children, continue-as-new or a close other than completion)", in.RunID)
	}
	o := in.Outcome
	kind := 0 // an activity's outcome
	if o.TaskID == 0 {
		if o.TimerSeq == 0 {
			return nil, fmt.Errorf("commit workflow task of run %s: the fused outcome names neither an activity task nor a timer", in.RunID)
		}
		kind = 1
	}
	args["act_id"], args["act_attempt"], args["fired_seq"] = o.TaskID, o.Attempt, o.TimerSeq
	sql, many := fusedStepSQL[kind], fusedStepMany[kind]
	if in.Close != nil {
		sql, many = fusedCloseSQL[kind], fusedCloseMany[kind]
	}
	var (
		found, ok int
		first     *int64
		claimed   claimedActivities
	)
	next, err := s.queryRowClaiming(ctx, in.RunID, sql, many, args, in.ClaimNext, func(row pgx.Row) error {
		if in.Close != nil { // a close says who may wait for it
			return row.Scan(&found, &ok, &first, &ready.ActivityQueues, &claimed, &ready.TimerAt, &ready.CloseWaiter)
		}
		return row.Scan(&found, &ok, &first, &ready.ActivityQueues, &claimed, &ready.TimerAt)
	})
	ready.Next = next // the slot's, whatever became of the write
	switch {
	case err != nil && kind == 1:
		return nil, fmt.Errorf("commit workflow task of run %s with the firing of timer %d: %w", in.RunID, o.TimerSeq, translate(err))
	case err != nil:
		return nil, fmt.Errorf("commit workflow task of run %s with the outcome of activity task %d: %w", in.RunID, o.TaskID, translate(err))
	case found == 0 && kind == 1:
		return nil, store.ErrRunMoved // the timer is gone
	case found == 0:
		return nil, store.ErrLeaseLost
	case ok == 0:
		return nil, store.ErrRunMoved
	}
	if first != nil {
		ready.FirstEventID = *first
	}
	return claimed, nil
}

// fusedStepMany and fusedCloseMany are fusedStepSQL and fusedCloseSQL for
// many runs at once (manyStmt), [0] for activity outcomes and [1] for
// timers: the same locks in the same order (the activity tasks, in write
// order, then the runs; for timers the runs, then the timers), the same
// fences per run, one row per write.
var (
	fusedStepMany = [2]*manyStmt{
		{sql: fusedStepManyActivitySQL, scalars: fusedManyScalars, lists: manyCommandLists},
		{sql: fusedStepManyTimerSQL, scalars: fusedManyScalars, lists: manyCommandLists},
	}
	fusedCloseMany = [2]*manyStmt{
		{sql: fusedCloseManyActivitySQL, scalars: fusedManyCloseScalars, lists: manyCommandLists[:1]},
		{sql: fusedCloseManyTimerSQL, scalars: fusedManyCloseScalars, lists: manyCommandLists[:1]},
	}
	fusedManyScalars      = []string{"run_id", "act_id", "act_attempt", "fired_seq", "processed", "now"}
	fusedManyCloseScalars = []string{"run_id", "act_id", "act_attempt", "fired_seq", "processed", "now", "result"}
)

// The four statements for many, and the parts in which they differ: their
// input (a close has results), their first lock (an activity task, or a
// timer read), whether they close the run, and what they consume.
const (
	fusedStepManyActivitySQL = fusedManyStepInput + fusedManyActivityLock + fusedManyRun + fusedManyRunWhere + fusedManyReturning +
		fusedManyActivityDone + fusedManyStepTail
	fusedStepManyTimerSQL = fusedManyStepInput + fusedManyTimerRead + fusedManyRun + fusedManyRunWhere + fusedManyReturning +
		fusedManyTimerDone + fusedManyStepTail
	fusedCloseManyActivitySQL = fusedManyCloseInput + fusedManyActivityLock + fusedManyRun + fusedManyCloseSet + fusedManyRunWhere +
		fusedManyCloseCond + fusedManyReturning + fusedManyActivityDone + `
` + manyEventsCTE + `), ctm AS (
    ` + fusedManyTimersDone + `
)` + fusedManyCloseTail
	fusedCloseManyTimerSQL = fusedManyCloseInput + fusedManyTimerRead + fusedManyRun + fusedManyCloseSet + fusedManyRunWhere +
		fusedManyCloseCond + fusedManyReturning + fusedManyTimersDone + `
` + manyEventsCTE + `)` + fusedManyCloseTail

	fusedManyInputHead = `
WITH inp AS (
    SELECT * FROM unnest(@run_id::uuid[], @act_id::bigint[], @act_attempt::int[], @fired_seq::bigint[],
        @processed::bigint[], @now::timestamptz[], @n_events::int[]`
	fusedManyStepInput = fusedManyInputHead + `)
        WITH ORDINALITY AS i(run_id, act_id, act_attempt, fired_seq, processed, now, n, ix)
), act AS (`
	fusedManyCloseInput = fusedManyInputHead + `, @result::jsonb[])
        WITH ORDINALITY AS i(run_id, act_id, act_attempt, fired_seq, processed, now, n, result, ix)
), act AS (`
	fusedManyActivityLock = `
    SELECT i.ix, t.run_id FROM (SELECT * FROM inp ORDER BY ix) i
    CROSS JOIN LATERAL (
        SELECT t.run_id FROM durable_activity_tasks t
        WHERE t.id = i.act_id AND t.attempt = i.act_attempt AND t.run_id = i.run_id
        FOR UPDATE
    ) t`
	fusedManyTimerRead = `
    SELECT i.ix, d.run_id FROM inp i
    CROSS JOIN LATERAL (
        SELECT d.run_id FROM durable_timers d WHERE d.run_id = i.run_id AND d.seq = i.fired_seq
        LIMIT 1
    ) d`
	fusedManyRun = `
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + i.n, processed_event_id = i.processed, updated_at = greatest(r.updated_at, i.now)`
	fusedManyCloseSet = `,
        status = 'completed', result = i.result, closed_at = greatest(r.updated_at, i.now)`
	fusedManyRunWhere = `
    FROM act JOIN inp i ON i.ix = act.ix
    WHERE r.run_id = act.run_id AND ` + runOpen + ` AND r.next_event_id = i.processed
        AND r.run_id = ANY(@run_id::uuid[])`
	fusedManyCloseCond = `
      AND NOT EXISTS (SELECT 1 FROM durable_activity_tasks o
          WHERE o.run_id = r.run_id AND o.id <> i.act_id AND o.run_id = ANY(@run_id::uuid[]))`
	fusedManyReturning = `
    RETURNING i.ix, r.run_id, r.queue, r.next_event_id - i.n AS first_id, i.now, r.updated_at AS at, i.act_id, i.fired_seq, r.waiter
), done AS (
    `
	fusedManyActivityDone = `DELETE FROM durable_activity_tasks a USING run
    WHERE a.id = run.act_id AND a.id = ANY(@act_id::bigint[])`
	fusedManyTimerDone = `DELETE FROM durable_timers d USING run
    WHERE d.run_id = run.run_id AND d.seq = run.fired_seq AND d.run_id = ANY(@run_id::uuid[])`
	fusedManyTimersDone = `DELETE FROM durable_timers d USING run WHERE d.run_id = run.run_id AND d.run_id = ANY(@run_id::uuid[])`
	fusedManyStepTail   = `
` + manyEventsCTE + manyActivitiesCTE + `)` + fusedManyFences + manyReadyColumns
	fusedManyFences = `
SELECT i.ix, (SELECT count(*) FROM act WHERE act.ix = i.ix), (SELECT count(*) FROM run WHERE run.ix = i.ix),
    (SELECT first_id FROM run WHERE run.ix = i.ix),`
	fusedManyCloseTail = fusedManyFences + `
    NULL::text[], NULL::json, NULL::timestamptz, coalesce((SELECT waiter FROM run WHERE run.ix = i.ix), '')
FROM inp i ORDER BY i.ix`
)
