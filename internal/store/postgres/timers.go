package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// fireTimersSQL fires due timers. It locks the timers' runs first, skipping
// runs another transaction holds (a committing workflow task, another
// scanner): every writer locks a run before its timers, so this cannot
// deadlock, and a skipped timer fires in the next round.
const fireTimersSQL = `
WITH due AS (
    SELECT run_id, seq FROM durable_timers
    WHERE fire_at <= @now AND run_id <> ALL(@skip::uuid[])
    ORDER BY fire_at
    LIMIT @limit
), locked AS (
    SELECT r.run_id FROM durable_runs r
    WHERE r.run_id = ANY(ARRAY(SELECT run_id FROM due))
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM durable_timers t
    USING due, locked
    WHERE t.run_id = due.run_id AND t.seq = due.seq AND locked.run_id = due.run_id
        AND t.run_id = ANY(ARRAY(SELECT run_id FROM locked))
    RETURNING t.run_id, t.seq, t.fire_at
), per_run AS (
    SELECT run_id, count(*) AS n FROM del GROUP BY run_id
), run AS (
    UPDATE durable_runs r
    SET next_event_id = r.next_event_id + per_run.n, updated_at = ` + eventTime + `
    FROM per_run
    WHERE r.run_id = per_run.run_id AND ` + runOpen + ` AND r.run_id = ANY(ARRAY(SELECT run_id FROM per_run))
    RETURNING r.run_id, r.workflow_id, r.workflow_type, r.queue, r.processed_event_id, r.parent_run_id,
        r.next_event_id - per_run.n AS first_id, r.trace_context, r.updated_at AS at
), ev AS (
    INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
    SELECT del.run_id, run.first_id + row_number() OVER (PARTITION BY del.run_id ORDER BY del.seq) - 1,
        'timer_fired', jsonb_build_object('seq', del.seq), run.at
    FROM del JOIN run ON run.run_id = del.run_id
), pick AS (
    -- With claim_as, the first claim_limits[i] runs of the worker's types on
    -- queue claim_queues[i] get their task claimed for it.
    SELECT run.run_id, run.queue, @claim_as::text <> '' AND ok AND
        row_number() OVER (PARTITION BY run.queue, ok ORDER BY run.run_id) <= coalesce(b.n, 0) AS claim
    FROM run CROSS JOIN LATERAL (SELECT run.workflow_type = ANY(@types::text[]) AS ok) t
    LEFT JOIN unnest(@claim_queues::text[], @claim_limits::int[]) AS b(queue, n) ON b.queue = run.queue
), wt AS (
    INSERT INTO durable_workflow_tasks (run_id, queue, run_after, locked_by, locked_until, token)
    SELECT run_id, queue,
        CASE WHEN claim THEN @until ELSE @now END,
        CASE WHEN claim THEN @claim_as::text END,
        CASE WHEN claim THEN @until::timestamptz END,
        CASE WHEN claim THEN nextval('durable_task_token') ELSE 0 END
    FROM pick
    ON CONFLICT (run_id) DO NOTHING
    RETURNING run_id, queue, locked_by IS NOT NULL AS claimed, token
)
SELECT (SELECT count(*) FROM del),
    coalesce((SELECT array_agg(DISTINCT queue) FROM wt WHERE NOT claimed), '{}'),
    coalesce((SELECT json_agg(json_build_object('run_id', del.run_id, 'seq', del.seq,
        'lag', extract(epoch FROM (@now - del.fire_at))::float8, 'trace', coalesce(run.trace_context, '')))
        FROM del JOIN run ON run.run_id = del.run_id), '[]'),
    coalesce((SELECT json_agg(json_build_object('run_id', run.run_id, 'workflow_id', run.workflow_id,
        'type', run.workflow_type, 'queue', run.queue, 'token', wt.token, 'processed', run.processed_event_id,
        'trace', coalesce(run.trace_context, ''), 'parent', coalesce(run.parent_run_id::text, ''), 'first_id', run.first_id,
        'at', run.at))
        FROM wt JOIN run ON run.run_id = wt.run_id WHERE wt.claimed), '[]')`

// FireTimers implements store.Store. The tasks it claims come with the
// TimerFired events the fire appended.
func (s *Store) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	var (
		f     store.Fired
		fired []struct {
			RunID string  `json:"run_id"`
			Seq   int64   `json:"seq"`
			Lag   float64 `json:"lag"`
			Trace string  `json:"trace"`
		}
		claimed []struct {
			RunID        string    `json:"run_id"`
			WorkflowID   string    `json:"workflow_id"`
			WorkflowType string    `json:"type"`
			Queue        string    `json:"queue"`
			Token        int64     `json:"token"`
			Processed    int64     `json:"processed"`
			Trace        string    `json:"trace"`
			Parent       string    `json:"parent"`
			FirstID      int64     `json:"first_id"`
			At           time.Time `json:"at"` // the events' time (eventTime)
		}
		queues = make([]string, 0, len(in.Claim))
		limits = make([]int32, 0, len(in.Claim))
	)
	for q, n := range in.Claim {
		queues, limits = append(queues, q), append(limits, int32(n))
	}
	args := namedArgs{
		"now": in.Now, "limit": in.Limit, "claim_as": in.ClaimAs, "until": in.Now.Add(in.Lease),
		"claim_queues": queues, "claim_limits": limits, "types": arrayArg(in.Types), "skip": uuidArray(in.Skip),
	}
	_, err := queryIndexed(ctx, s, fireTimersSQL, args, func(row pgx.CollectableRow) (struct{}, error) {
		return struct{}{}, row.Scan(&f.Count, &f.Queues, &fired, &claimed)
	})
	if err != nil {
		return f, nil, fmt.Errorf("fire timers: %w", err)
	}
	seqs := map[string][]int64{} // the timers fired, by run
	for _, t := range fired {
		lag := time.Duration(t.Lag * float64(time.Second))
		f.Timers = append(f.Timers, store.FiredTimer{RunID: t.RunID, Seq: t.Seq, Lag: lag, TraceContext: t.Trace})
		seqs[t.RunID] = append(seqs[t.RunID], t.Seq)
	}
	tasks := make([]store.WorkflowTask, len(claimed))
	for i, c := range claimed {
		tasks[i] = store.WorkflowTask{
			RunID: c.RunID, WorkflowID: c.WorkflowID, WorkflowType: c.WorkflowType, Queue: c.Queue, Token: c.Token,
			ProcessedEventID: c.Processed, TraceContext: c.Trace, ParentRunID: c.Parent, LockedUntil: in.Now.Add(in.Lease),
		}
		// The fire numbered a run's TimerFired events in timer order.
		run := seqs[c.RunID]
		slices.Sort(run)
		for j, seq := range run {
			tasks[i].Events = append(tasks[i].Events, history.Event{ID: c.FirstID + int64(j), Time: c.At, Attributes: history.TimerFired{Seq: seq}})
		}
	}
	return f, tasks, nil
}

// NextTimer implements store.Store.
func (s *Store) NextTimer(ctx context.Context, skip []string) (time.Time, bool, error) {
	var t time.Time
	// By the fire_at index in order (see nextWorkflowDueSQL).
	err := s.queryRow(ctx, `SELECT fire_at FROM durable_timers WHERE run_id <> ALL($1::uuid[]) ORDER BY fire_at LIMIT 1`,
		scanInto(&t), uuidArray(skip))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("next timer: %w", err)
	}
	return t, true, nil
}
