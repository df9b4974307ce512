package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/history"
)

const (
	insertEventSQL = `
INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
VALUES (@run_id, @event_id, @type, @attributes, @at)`
	listEventsSQL = `
SELECT event_id, type, attributes, created_at FROM durable_events
WHERE run_id = @run_id AND event_id > @after
ORDER BY event_id`
	listEventsOfRunsSQL = `
SELECT run_id, event_id, type, attributes, created_at FROM durable_events
WHERE run_id IN (SELECT value FROM json_each(@ids))
ORDER BY run_id, event_id`
)

// insertEvents inserts a run's events, of the types and encoded attributes
// given, numbered from firstID, all at the time at.
func insertEvents(ctx context.Context, tx *sql.Tx, runID string, firstID int64, types, attrs []string, at int64) error {
	for i := range types {
		_, err := tx.ExecContext(ctx, insertEventSQL, sql.Named("run_id", runID), sql.Named("event_id", firstID+int64(i)),
			sql.Named("type", types[i]), sql.Named("attributes", attrs[i]), sql.Named("at", at))
		if err != nil {
			return fmt.Errorf("append %s event %d to run %s: %w", types[i], firstID+int64(i), runID, err)
		}
	}
	return nil
}

// eventTypes returns the wire types of events, in order.
func eventTypes(events []history.Attributes) []string {
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.EventType()
	}
	return types
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	events, err := listEvents(ctx, s.reader(), runID, afterID)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	return events, nil
}

// listEvents returns the run's events with IDs above after, in order.
func listEvents(ctx context.Context, q querier, runID string, after int64) ([]history.Event, error) {
	return queryAll(ctx, q, listEventsSQL, func(rows *sql.Rows) (history.Event, error) {
		var r eventRow
		if err := rows.Scan(&r.id, &r.typ, &r.attrs, &r.at); err != nil {
			return history.Event{}, err
		}
		return r.decode()
	}, sql.Named("run_id", runID), sql.Named("after", after))
}

// ListEventsOfRuns implements store.Store: the whole histories of runs, by
// run ID, in one statement. A run without events is absent, and so is a run
// with an event that does not decode (the caller reads it on its own, and
// meets the error there).
func (s *Store) ListEventsOfRuns(ctx context.Context, runIDs []string) (map[string][]history.Event, error) {
	byRun := map[string][]history.Event{}
	if len(runIDs) == 0 {
		return byRun, nil
	}
	rows, err := s.reader().QueryContext(ctx, listEventsOfRunsSQL, sql.Named("ids", jsonList(runIDs)))
	if err != nil {
		return nil, fmt.Errorf("list events of %d runs: %w", len(runIDs), err)
	}
	defer rows.Close()
	bad := map[string]bool{}
	for rows.Next() {
		var (
			runID string
			r     eventRow
		)
		if err := rows.Scan(&runID, &r.id, &r.typ, &r.attrs, &r.at); err != nil {
			return nil, fmt.Errorf("list events of %d runs: %w", len(runIDs), err)
		}
		ev, err := r.decode()
		switch {
		case err != nil:
			bad[runID] = true
			delete(byRun, runID)
		case !bad[runID]:
			byRun[runID] = append(byRun[runID], ev)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of %d runs: %w", len(runIDs), err)
	}
	return byRun, nil
}

// eventRow is an event as its row holds it.
type eventRow struct {
	id    int64
	typ   string
	attrs []byte
	at    int64
}

// decode returns the event, its attributes decoded.
func (r eventRow) decode() (history.Event, error) {
	a, err := history.Decode(r.typ, r.attrs)
	if err != nil {
		return history.Event{}, fmt.Errorf("event %d: %w", r.id, err)
	}
	return history.Event{ID: r.id, Time: fromMicros(r.at), Attributes: a}, nil
}

// runHead is what a write reads of a run before it appends to it.
type runHead struct {
	runID, workflowID, workflowType, queue, status string
	input                                          string
	nextEventID, processedEventID, updatedAt       int64
	trace, waiter                                  string
	parentRunID, parentClosePolicy                 string
	parentSeq                                      int64
}

const readRunSQL = `
SELECT run_id, workflow_id, workflow_type, queue, status, input, next_event_id, processed_event_id, updated_at,
    coalesce(trace_context, ''), coalesce(waiter, ''), coalesce(parent_run_id, ''), coalesce(parent_close_policy, ''),
    coalesce(parent_seq, 0)
FROM durable_runs WHERE run_id = @run_id`

// readRun reads the run a write appends to; ok is false if there is none.
func readRun(ctx context.Context, tx *sql.Tx, runID string) (h runHead, ok bool, err error) {
	err = tx.QueryRowContext(ctx, readRunSQL, sql.Named("run_id", runID)).Scan(&h.runID, &h.workflowID, &h.workflowType,
		&h.queue, &h.status, &h.input, &h.nextEventID, &h.processedEventID, &h.updatedAt, &h.trace, &h.waiter,
		&h.parentRunID, &h.parentClosePolicy, &h.parentSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("read run %s: %w", runID, err)
	}
	return h, true, nil
}

// running says whether the run is open.
func (h runHead) running() bool { return h.status == "running" }

// eventTime is the time an append stamps its events with, and the run's
// updated_at after it: the writer's now, but never before the run's last
// event (updated_at, which every append moves to its events' time), so
// that a history never goes back in time when its writers' clocks
// disagree a little.
func (h runHead) eventTime(now time.Time) int64 { return max(h.updatedAt, micros(now)) }

const appendToRunSQL = `
UPDATE durable_runs SET next_event_id = next_event_id + @n, updated_at = @at
WHERE run_id = @run_id`

// appendEvents appends encoded events to the run h (which the caller found
// running) and returns the first one's ID and their time.
func appendEvents(ctx context.Context, tx *sql.Tx, h runHead, types, attrs []string, now time.Time) (firstID, at int64, err error) {
	at = h.eventTime(now)
	if _, err := tx.ExecContext(ctx, appendToRunSQL, sql.Named("n", len(types)), sql.Named("at", at),
		sql.Named("run_id", h.runID)); err != nil {
		return 0, 0, fmt.Errorf("append to run %s: %w", h.runID, err)
	}
	if err := insertEvents(ctx, tx, h.runID, h.nextEventID, types, attrs, at); err != nil {
		return 0, 0, err
	}
	return h.nextEventID, at, nil
}

// appendEvent appends ev to the run if it is running and makes its
// workflow task ready at now, unless it has one. It returns the queue of a
// task it made ready, or "".
func appendEvent(ctx context.Context, tx *sql.Tx, runID string, ev history.Attributes, now time.Time) (string, error) {
	attrs, err := encodeEvent(ev)
	if err != nil {
		return "", fmt.Errorf("append to run %s: %w", runID, err)
	}
	h, ok, err := readRun(ctx, tx, runID)
	if err != nil || !ok || !h.running() {
		return "", err
	}
	if _, _, err := appendEvents(ctx, tx, h, []string{ev.EventType()}, []string{attrs}, now); err != nil {
		return "", err
	}
	made, err := readyTask(ctx, tx, runID, h.queue, micros(now))
	if err != nil || !made {
		return "", err
	}
	return h.queue, nil
}
