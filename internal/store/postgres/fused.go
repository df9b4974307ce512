package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/store"
)

// A fused step records an activity's outcome and the run's next workflow
// task in one statement (CommitWorkflowTaskParams.Outcome). There is no
// workflow task row to fence the write: the run's next event ID is the
// fence, since every write that adds to a run's history moves it. The
// statement locks the activity task (its claim's fence), then the run, the
// order an outcome takes; if either fence fails it changes nothing and
// says which.

const fusedHeadSQL = `
WITH act AS (
    SELECT run_id FROM durable_activity_tasks
    WHERE id = @act_id AND attempt = @act_attempt AND run_id = @run_id
    FOR UPDATE
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + cardinality(@types::text[]),
        processed_event_id = @processed,
        updated_at = @now`

const fusedRunTailSQL = `
    FROM act
    WHERE r.run_id = @run_id AND r.run_id = act.run_id AND ` + runOpen + ` AND r.next_event_id = @processed`

const fusedDoneSQL = `
    RETURNING r.run_id, r.queue, r.next_event_id - cardinality(@types::text[]) AS first_id
), done AS (
    DELETE FROM durable_activity_tasks a USING run WHERE a.id = @act_id
`

// fusedStepSQL: the outcome, the task's events and the activities it
// schedules (claimed for the worker where asked).
const fusedStepSQL = fusedHeadSQL + fusedRunTailSQL + fusedDoneSQL + commitEventsCTE + commitActivitiesCTE + `)
SELECT (SELECT count(*) FROM act), (SELECT count(*) FROM run), (SELECT first_id FROM run),
    (SELECT array_agg(DISTINCT queue) FROM acts WHERE run_after <= @now AND locked_by IS NULL),
    (SELECT json_agg(json_build_object('id', id, 'seq', seq, 'until', locked_until)) FROM acts WHERE locked_by IS NOT NULL)`

// fusedCloseSQL: the outcome and the run's completion. The run must have
// no other activity task (the engine fuses only a run that waits on
// nothing else); if it has one, the run's fence fails and the close takes
// the general statement, which deletes it in lock order. Its timers go.
const fusedCloseSQL = fusedHeadSQL + `,
        status = 'completed', result = @result::jsonb, closed_at = @now` + fusedRunTailSQL + `
      AND NOT EXISTS (SELECT 1 FROM durable_activity_tasks o WHERE o.run_id = r.run_id AND o.id <> @act_id)` +
	fusedDoneSQL + commitEventsCTE + `), ctm AS (
    DELETE FROM durable_timers d USING run WHERE d.run_id = run.run_id
)
SELECT (SELECT count(*) FROM act), (SELECT count(*) FROM run), (SELECT first_id FROM run),
    NULL::text[], NULL::json`

// commitFused runs a fused step. args are CommitWorkflowTask's.
func (s *Store) commitFused(ctx context.Context, in store.CommitWorkflowTaskParams, args namedArgs, ready *store.Ready) ([]claimedActivity, error) {
	if !in.Fusable() {
		return nil, fmt.Errorf("commit workflow task of run %s: an activity outcome cannot be fused with this commit (timers, cancellations, children, continue-as-new or a close other than completion)", in.RunID)
	}
	args["act_id"], args["act_attempt"] = in.Outcome.TaskID, in.Outcome.Attempt
	sql := fusedStepSQL
	if in.Close != nil {
		sql = fusedCloseSQL
	}
	var (
		found, ok int
		first     *int64
		claimed   []claimedActivity
	)
	err := s.queryRow(ctx, in.RunID, sql, args, func(row pgx.Row) error {
		return row.Scan(&found, &ok, &first, &ready.ActivityQueues, &claimed)
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("commit workflow task of run %s with the outcome of activity task %d: %w", in.RunID, in.Outcome.TaskID, translate(err))
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
