package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/history"
)

const listEventsSQL = `
SELECT event_id, type, attributes, created_at
FROM durable_events
WHERE run_id = @run_id AND event_id > @after
ORDER BY event_id`

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	events, err := queryIndexed(ctx, s, listEventsSQL, namedArgs{"run_id": runID, "after": afterID},
		func(row pgx.CollectableRow) (history.Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	return events, nil
}

const listEventsOfRunsSQL = `
SELECT run_id::text, event_id, type, attributes, created_at
FROM durable_events
WHERE run_id = ANY($1::uuid[])
ORDER BY durable_events.run_id, event_id`

// ListEventsOfRuns returns the whole histories of runs, by run ID, in one
// statement; a run without events is absent. An event that does not decode
// fails the whole read (the caller can read run by run to find it).
func (s *Store) ListEventsOfRuns(ctx context.Context, runIDs []string) (map[string][]history.Event, error) {
	byRun := make(map[string][]history.Event, len(runIDs))
	var undecodable error // names its run, as it is
	err := s.query(ctx, listEventsOfRunsSQL, func(rows pgx.Rows) error {
		for rows.Next() {
			var runID string
			ev, err := scanEvent(rows, &runID)
			if err != nil {
				undecodable = fmt.Errorf("list events of run %s: %w", runID, err)
				return undecodable
			}
			byRun[runID] = append(byRun[runID], ev)
		}
		return rows.Err()
	}, uuidArray(runIDs))
	switch {
	case undecodable != nil:
		return nil, undecodable
	case err != nil:
		return nil, fmt.Errorf("list events of %d runs: %w", len(runIDs), err)
	}
	return byRun, nil
}

// scanEvent reads a row of event_id, type, attributes and created_at,
// after the columns in before.
func scanEvent(row pgx.CollectableRow, before ...any) (history.Event, error) {
	var (
		id    int64
		typ   string
		attrs []byte
		at    time.Time
	)
	if err := row.Scan(append(before, &id, &typ, &attrs, &at)...); err != nil {
		return history.Event{}, err
	}
	a, err := history.Decode(typ, attrs)
	if err != nil {
		return history.Event{}, fmt.Errorf("event %d: %w", id, err)
	}
	return history.Event{ID: id, Time: at, Attributes: a}, nil
}

// encodeEvents returns the wire types and JSON attributes of events, for the
// unnest-based inserts.
func encodeEvents(events []history.Attributes) (types, attrs []string, err error) {
	types = make([]string, len(events))
	attrs = make([]string, len(events))
	for i, e := range events {
		b, err := history.Encode(e)
		if err != nil {
			return nil, nil, err
		}
		types[i] = e.EventType()
		attrs[i] = string(b)
	}
	return types, attrs, nil
}
