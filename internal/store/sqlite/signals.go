package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// SignalRun implements store.Store.
func (s *Store) SignalRun(ctx context.Context, in store.SignalParams, event history.Attributes) (store.Ready, error) {
	attrs, err := encodeEvent(event)
	if err != nil {
		return store.Ready{}, fmt.Errorf("%s to workflow %q: %w", event.EventType(), in.WorkflowID, err)
	}
	var (
		ready store.Ready
		found bool
	)
	err = s.write(ctx, func(tx *sql.Tx) (err error) {
		found, err = signal(ctx, tx, in, event.EventType(), attrs, &ready)
		return err
	})
	if err != nil {
		return store.Ready{}, fmt.Errorf("%s to workflow %q: %w", event.EventType(), in.WorkflowID, translate(err))
	}
	if !found {
		return store.Ready{}, s.noOpenRun(ctx, in.WorkflowID)
	}
	if in.Notify {
		s.announce(store.NoteWorkflowTasks, ready.WorkflowQueues)
	}
	return ready, nil
}

// signal appends an encoded event to the open run of in.WorkflowID (which
// must be in.RunID, if set) and makes its workflow task ready, unless it
// has one. found is false if there is no such run.
func signal(ctx context.Context, tx *sql.Tx, in store.SignalParams, typ, attrs string, ready *store.Ready) (found bool, err error) {
	runID, _, err := openRunOf(ctx, tx, in.WorkflowID)
	if err != nil || runID == "" || (in.RunID != "" && runID != in.RunID) {
		return false, err
	}
	h, ok, err := readRun(ctx, tx, runID)
	if err != nil || !ok {
		return false, err
	}
	if _, _, err := appendEvents(ctx, tx, h, []string{typ}, []string{attrs}, in.Now); err != nil {
		return false, err
	}
	made, err := readyTask(ctx, tx, runID, h.queue, micros(in.Now))
	if made {
		ready.WorkflowQueues = append(ready.WorkflowQueues, h.queue)
	}
	return true, err
}

// noOpenRun tells store.ErrRunClosed from store.ErrNotFound
// (store.NoOpenRun).
func (s *Store) noOpenRun(ctx context.Context, workflowID string) error {
	return store.NoOpenRun(ctx, s, workflowID)
}

// TerminateRun implements store.Store. The run reports to its parent, if it
// has one, and its children go as their parent-close policies say.
func (s *Store) TerminateRun(ctx context.Context, in store.TerminateParams) (store.Ready, error) {
	var (
		ready store.Ready
		runID string
	)
	in.Reason = store.EscapeText(in.Reason)
	closed := &store.CloseRun{Status: store.StatusTerminated, Failure: &history.Failure{Message: "terminated: " + in.Reason, Class: "terminated"}}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var (
			parentRunID string
			err         error
		)
		if runID, parentRunID, err = openRunOf(ctx, tx, in.WorkflowID); err != nil || runID == "" {
			return err
		}
		if err := terminate(ctx, tx, runID, in.Reason, in.Now); err != nil {
			return err
		}
		if parentRunID != "" {
			if err := reportToParent(ctx, tx, runID, parentRunID, closed, in.Now, &ready); err != nil {
				return err
			}
		}
		return closeChildren(ctx, tx, runID, in.Now, &ready)
	})
	if err != nil {
		return store.Ready{}, fmt.Errorf("terminate workflow %q: %w", in.WorkflowID, translate(err))
	}
	if runID == "" {
		return store.Ready{}, s.noOpenRun(ctx, in.WorkflowID)
	}
	ready.WorkflowQueues = distinct(ready.WorkflowQueues)
	ready.ClosedRun, ready.Closed = runID, closed
	return ready, nil
}

const terminateRunSQL = `
UPDATE durable_runs
SET next_event_id = next_event_id + 1, updated_at = @at, status = 'terminated', closed_at = @at, failure = @failure
WHERE run_id = @run_id`

// terminate closes the running run at once with a WorkflowTerminated event
// (reason is escaped already), dropping its tasks and timers. A run that
// is not running is left as it is.
func terminate(ctx context.Context, tx *sql.Tx, runID, reason string, now time.Time) error {
	h, ok, err := readRun(ctx, tx, runID)
	if err != nil || !ok || !h.running() {
		return err
	}
	ev := history.WorkflowTerminated{Reason: reason}
	attrs, err := encodeEvent(ev)
	if err != nil {
		return err
	}
	failure, err := json.Marshal(history.Failure{Message: "terminated: " + reason, Class: "terminated"})
	if err != nil {
		return err
	}
	at := h.eventTime(now)
	if _, err := tx.ExecContext(ctx, terminateRunSQL, sql.Named("at", at), sql.Named("failure", string(failure)),
		sql.Named("run_id", runID)); err != nil {
		return fmt.Errorf("terminate run %s: %w", runID, err)
	}
	if err := insertEvents(ctx, tx, runID, h.nextEventID, []string{ev.EventType()}, []string{attrs}, at); err != nil {
		return err
	}
	for _, query := range []string{deleteWorkflowTaskSQL, deleteActivityTasksSQL, deleteTimersSQL} {
		if _, err := tx.ExecContext(ctx, query, sql.Named("run_id", runID)); err != nil {
			return fmt.Errorf("terminate run %s: drop its work: %w", runID, err)
		}
	}
	return nil
}
