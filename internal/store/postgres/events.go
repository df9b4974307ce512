package postgres

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

const listEventsSQL = `
SELECT event_id, type, attributes, created_at
FROM durable_events
WHERE run_id = @run_id AND event_id > @after
ORDER BY event_id`

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	rows, err := queryIndexed(ctx, s, listEventsSQL, namedArgs{"run_id": runID, "after": afterID},
		func(row pgx.CollectableRow) (r eventRow, err error) {
			err = row.Scan(r.dest()...) // before r is read: Go leaves the order of return operands open
			return r, err
		})
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	// A long history is decoded on the CPUs, in parts: half the time of a
	// replay of 10,000 events went to decoding them (docs/performance.md,
	// history, 2026-12-01 at 9212902).
	events, err := decodeEvents(rows, min(runtime.GOMAXPROCS(0), len(rows)/decodePartMin))
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	return events, nil
}

// decodePartMin is the fewest events ListEvents gives a part of its
// decoding: a history shorter than two parts is decoded in one.
const decodePartMin = 1000

// decodeEvents decodes rows, in order, in parts (at least one) decoded at
// once; the error returned is that of the first bad row.
func decodeEvents(rows []eventRow, parts int) ([]history.Event, error) {
	parts = max(parts, 1)
	events := make([]history.Event, len(rows))
	errs := make([]error, parts)
	decode := func(p int) {
		for i := p * len(rows) / parts; i < (p+1)*len(rows)/parts; i++ {
			var err error
			if events[i], err = rows[i].decode(); err != nil {
				errs[p] = err
				return
			}
		}
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Go(func() { decode(p) })
	}
	decode(0)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return events, nil
}

const listEventsOfRunsSQL = `
SELECT run_id::text, event_id, type, attributes, created_at
FROM durable_events
WHERE run_id = ANY($1::uuid[])
ORDER BY durable_events.run_id, event_id`

// ListEventsOfRuns returns the whole histories of runs, by run ID, in one
// statement; a run without events is absent, and so is a run with an event
// that does not decode (the caller reads it on its own, and meets the
// error there).
func (s *Store) ListEventsOfRuns(ctx context.Context, runIDs []string) (byRun map[string][]history.Event, err error) {
	err = s.query(ctx, listEventsOfRunsSQL, func(rows pgx.Rows) (err error) {
		byRun, err = scanHistories(rows)
		return err
	}, uuidArray(runIDs))
	if err != nil {
		return nil, fmt.Errorf("list events of %d runs: %w", len(runIDs), err)
	}
	return byRun, nil
}

// scanHistories reads rows of run_id, event_id, type, attributes and
// created_at into histories by run, each in event order, leaving out the
// runs with an event that does not decode.
func scanHistories(rows pgx.Rows) (map[string][]history.Event, error) {
	byRun := map[string][]history.Event{}
	bad := map[string]bool{}
	for rows.Next() {
		var (
			runID string
			r     eventRow
		)
		if err := rows.Scan(append([]any{&runID}, r.dest()...)...); err != nil {
			return nil, err
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
	for _, events := range byRun {
		slices.SortFunc(events, func(a, b history.Event) int { return cmp.Compare(a.ID, b.ID) })
	}
	return byRun, rows.Err()
}

// eventRow is an event as its row holds it: event_id, type, attributes
// and created_at.
type eventRow struct {
	id    int64
	typ   string
	attrs []byte
	at    time.Time
}

// dest returns the scan destinations of the row's columns, in order.
func (r *eventRow) dest() []any { return []any{&r.id, &r.typ, &r.attrs, &r.at} }

// decode returns the event, its attributes decoded.
func (r *eventRow) decode() (history.Event, error) {
	a, err := history.Decode(r.typ, r.attrs)
	if err != nil {
		return history.Event{}, fmt.Errorf("event %d: %w", r.id, err)
	}
	return history.Event{ID: r.id, Time: r.at, Attributes: a}, nil
}

// encodeEvents returns the wire types and JSON attributes of events, for the
// unnest-based inserts, their texts escaped and their payloads checked
// (encodeEvent).
func encodeEvents(events []history.Attributes) (types, attrs []string, err error) {
	types = make([]string, len(events))
	attrs = make([]string, len(events))
	for i, e := range events {
		b, err := store.EncodeEvent(e)
		if err != nil {
			return nil, nil, err
		}
		types[i] = e.EventType()
		attrs[i] = string(b)
	}
	return types, attrs, nil
}
