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
WHERE run_id = $1 AND event_id > $2
ORDER BY event_id`

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	rows, err := s.db.Query(ctx, listEventsSQL, runID, afterID)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (history.Event, error) {
		var (
			id    int64
			typ   string
			attrs []byte
			at    time.Time
		)
		if err := row.Scan(&id, &typ, &attrs, &at); err != nil {
			return history.Event{}, err
		}
		a, err := history.Decode(typ, attrs)
		if err != nil {
			return history.Event{}, fmt.Errorf("event %d: %w", id, err)
		}
		return history.Event{ID: id, Time: at, Attributes: a}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	return events, nil
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
