package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/timer"
)

// fireTimersSQL fires due timers. It locks the timers' runs first, skipping
// runs another transaction holds (a committing workflow task, another
// scanner): every writer locks a run before its timers, so this cannot
// deadlock, and a skipped timer fires in the next round.
const fireTimersSQL = `
WITH due AS (
    SELECT run_id, seq FROM durable_timers
    WHERE fire_at <= @now
    ORDER BY fire_at
    LIMIT @limit
), locked AS (
    SELECT r.run_id FROM durable_runs r
    WHERE r.run_id IN (SELECT run_id FROM due)
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM durable_timers t
    USING due, locked
    WHERE t.run_id = due.run_id AND t.seq = due.seq AND locked.run_id = due.run_id
    RETURNING t.run_id, t.seq, t.fire_at
), per_run AS (
    SELECT run_id, count(*) AS n FROM del GROUP BY run_id
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + per_run.n, updated_at = @now
    FROM per_run
    WHERE r.run_id = per_run.run_id AND ` + runOpen + `
    RETURNING r.run_id, r.queue, r.next_event_id - per_run.n AS first_id, r.trace_context
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT del.run_id, run.first_id + row_number() OVER (PARTITION BY del.run_id ORDER BY del.seq) - 1,
        'timer_fired', jsonb_build_object('seq', del.seq), @now
    FROM del JOIN run ON run.run_id = del.run_id
), wt AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after)
    SELECT run_id, queue, @now FROM run
    ON CONFLICT (run_id) DO NOTHING
    RETURNING queue
)
SELECT (SELECT count(*) FROM del),
    coalesce((SELECT array_agg(DISTINCT queue) FROM wt), '{}'),
    coalesce((SELECT json_agg(json_build_object('run_id', del.run_id, 'seq', del.seq,
        'lag', extract(epoch FROM (@now - del.fire_at))::float8, 'trace', coalesce(run.trace_context, '')))
        FROM del JOIN run ON run.run_id = del.run_id), '[]')`

// FireTimers implements timer.Store.
func (s *Store) FireTimers(ctx context.Context, now time.Time, limit int) (timer.Fired, error) {
	var (
		f     timer.Fired
		fired []struct {
			RunID string  `json:"run_id"`
			Seq   int64   `json:"seq"`
			Lag   float64 `json:"lag"`
			Trace string  `json:"trace"`
		}
	)
	err := s.db.QueryRow(ctx, fireTimersSQL, namedArgs{"now": now, "limit": limit}).Scan(&f.Count, &f.Queues, &fired)
	if err != nil {
		return f, fmt.Errorf("fire timers: %w", err)
	}
	for _, t := range fired {
		lag := time.Duration(t.Lag * float64(time.Second))
		f.Timers = append(f.Timers, timer.FiredTimer{RunID: t.RunID, Seq: t.Seq, Lag: lag, TraceContext: t.Trace})
	}
	return f, nil
}

// NextTimer implements timer.Store.
func (s *Store) NextTimer(ctx context.Context) (time.Time, bool, error) {
	var t *time.Time
	if err := s.db.QueryRow(ctx, `SELECT min(fire_at) FROM durable_timers`).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("next timer: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return *t, true, nil
}
