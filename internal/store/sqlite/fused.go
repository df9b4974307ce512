package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/durable-go/durable/internal/store"
)

// A fused step records an activity's outcome, or a timer's firing, and the
// run's next workflow task in one transaction
// (CommitWorkflowTaskParams.Outcome). There is no workflow task to fence
// the write: the run's next event ID is the fence, since every write that
// adds to a run's history moves it (a timer fired by a scanner appends its
// TimerFired). An activity's outcome is fenced by its claim too: the task
// must still be there at the attempt. If a fence fails the step changes
// nothing and says which.

const (
	fusedActivityHeldSQL = `
SELECT EXISTS (SELECT 1 FROM durable_activity_tasks WHERE id = @id AND attempt = @attempt AND run_id = @run_id)`
	fusedTimerThereSQL = `SELECT EXISTS (SELECT 1 FROM durable_timers WHERE run_id = @run_id AND seq = @seq)`
	// otherActivitiesSQL: a fused close is for a run that waits on
	// nothing else; with another activity task pending, the close takes
	// the general commit, which deletes it.
	otherActivitiesSQL = `SELECT EXISTS (SELECT 1 FROM durable_activity_tasks WHERE run_id = @run_id AND id <> @id)`
	fusedRunSQL        = `
UPDATE durable_runs SET next_event_id = next_event_id + @n, processed_event_id = @processed, updated_at = @at
WHERE run_id = @run_id`
	fusedCloseRunSQL = `
UPDATE durable_runs SET next_event_id = next_event_id + @n, processed_event_id = @processed, updated_at = @at,
    status = 'completed', result = @result, closed_at = @at
WHERE run_id = @run_id`
	deleteActivityTaskSQL = `DELETE FROM durable_activity_tasks WHERE id = @id`
	deleteTimerSQL        = `DELETE FROM durable_timers WHERE run_id = @run_id AND seq = @seq`
)

// commitFused runs a fused step; attrs are the encoded in.Events.
func (s *Store) commitFused(ctx context.Context, in store.CommitWorkflowTaskParams, attrs []string) (store.Ready, error) {
	if !in.Fusable() {
		return store.Ready{}, fmt.Errorf("commit workflow task of run %s: an outcome cannot be fused with this commit (cancellations, children, continue-as-new or a close other than completion)", in.RunID)
	}
	o := in.Outcome
	timer := o.TaskID == 0
	if timer && o.TimerSeq == 0 {
		return store.Ready{}, fmt.Errorf("commit workflow task of run %s: the fused outcome names neither an activity task nor a timer", in.RunID)
	}
	var (
		ready   store.Ready
		refused error
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var there bool
		query, args := fusedActivityHeldSQL, []any{sql.Named("id", o.TaskID), sql.Named("attempt", o.Attempt), sql.Named("run_id", in.RunID)}
		if timer {
			query, args = fusedTimerThereSQL, []any{sql.Named("run_id", in.RunID), sql.Named("seq", o.TimerSeq)}
		}
		if err := tx.QueryRowContext(ctx, query, args...).Scan(&there); err != nil {
			return err
		}
		switch {
		case !there && timer:
			refused = store.ErrRunMoved // the timer fired elsewhere, or was canceled
			return nil
		case !there:
			refused = store.ErrLeaseLost
			return nil
		}
		h, ok, err := readRun(ctx, tx, in.RunID)
		if err != nil {
			return err
		}
		if !ok || !h.running() || h.nextEventID != in.ProcessedEventID {
			refused = store.ErrRunMoved
			return nil
		}
		if in.Close != nil {
			var others bool
			if err := tx.QueryRowContext(ctx, otherActivitiesSQL, sql.Named("run_id", in.RunID), sql.Named("id", o.TaskID)).Scan(&others); err != nil {
				return err
			}
			if others {
				refused = store.ErrRunMoved
				return nil
			}
		}
		return fused(ctx, tx, in, h, attrs, &ready)
	})
	if err != nil {
		what := fmt.Sprintf("the outcome of activity task %d", o.TaskID)
		if timer {
			what = fmt.Sprintf("the firing of timer %d", o.TimerSeq)
		}
		return store.Ready{}, fmt.Errorf("commit workflow task of run %s with %s: %w", in.RunID, what, translate(err))
	}
	if refused != nil {
		return store.Ready{}, refused
	}
	return handedOff(in, ready), nil
}

// fused applies a fused step to the run h, whose fences held.
func fused(ctx context.Context, tx *sql.Tx, in store.CommitWorkflowTaskParams, h runHead, attrs []string, ready *store.Ready) error {
	first, at := h.nextEventID, h.eventTime(in.Now)
	ready.FirstEventID = first
	query, args := fusedRunSQL, []any{sql.Named("n", len(in.Events)), sql.Named("processed", in.ProcessedEventID),
		sql.Named("at", at), sql.Named("run_id", in.RunID)}
	if in.Close != nil {
		query, args = fusedCloseRunSQL, append(args, sql.Named("result", nullJSON(in.Close.Result)))
		ready.CloseWaiter = h.waiter
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("update the run: %w", err)
	}
	// What the step consumes: the activity task, or the fired timer (every
	// timer of a run that closes).
	var err error
	switch o := in.Outcome; {
	case in.Close != nil:
		if o.TaskID != 0 {
			_, err = tx.ExecContext(ctx, deleteActivityTaskSQL, sql.Named("id", o.TaskID))
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, deleteTimersSQL, sql.Named("run_id", in.RunID))
		}
	case o.TaskID != 0:
		_, err = tx.ExecContext(ctx, deleteActivityTaskSQL, sql.Named("id", o.TaskID))
	default:
		_, err = tx.ExecContext(ctx, deleteTimerSQL, sql.Named("run_id", in.RunID), sql.Named("seq", o.TimerSeq))
	}
	if err != nil {
		return fmt.Errorf("consume the outcome: %w", err)
	}
	if err := insertEvents(ctx, tx, in.RunID, first, eventTypes(in.Events), attrs, at); err != nil {
		return err
	}
	if in.Close != nil {
		return nil
	}
	return scheduleCommands(ctx, tx, in.RunID, h.queue, in, ready)
}
