package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/durable-go/durable/internal/store"
)

// The reads in this file serve operators (the durable command, Describe,
// stats) and the test clock (IdleUntil).

const listRunsSQL = `
SELECT run_id, workflow_id, workflow_type, queue, status, created_at, closed_at
FROM durable_runs
WHERE (@status = '' OR status = @status)
  AND (@workflow_type = '' OR workflow_type = @workflow_type)
  AND (@workflow_id = '' OR workflow_id = @workflow_id)
  AND (@since IS NULL OR created_at >= @since)
ORDER BY created_at DESC, run_id DESC
LIMIT @limit`

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, in store.ListRunsParams) ([]store.RunSummary, error) {
	if in.Limit <= 0 {
		in.Limit = 100
	}
	var since any
	if !in.Since.IsZero() {
		since = micros(in.Since)
	}
	runs, err := queryAll(ctx, s.reader(), listRunsSQL, func(rows *sql.Rows) (store.RunSummary, error) {
		var (
			r       store.RunSummary
			created int64
			closed  sql.NullInt64
		)
		err := rows.Scan(&r.RunID, &r.WorkflowID, &r.WorkflowType, &r.Queue, &r.Status, &created, &closed)
		r.CreatedAt, r.ClosedAt = fromMicros(created), nullTime(closed)
		return r, err
	}, sql.Named("status", in.Status), sql.Named("workflow_type", in.WorkflowType), sql.Named("workflow_id", in.WorkflowID),
		sql.Named("since", since), sql.Named("limit", in.Limit))
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

const listPendingActivitiesSQL = `
SELECT id, seq, activity, queue, attempt, max_attempts, coalesce(last_error, ''),
    run_after, coalesce(locked_by, ''), locked_until, input, heartbeat, options, rate_limited, created_at
FROM durable_activity_tasks
WHERE run_id = @run_id
ORDER BY seq, id`

// ListPendingActivities implements store.Store.
func (s *Store) ListPendingActivities(ctx context.Context, runID string) ([]store.PendingActivity, error) {
	acts, err := queryAll(ctx, s.reader(), listPendingActivitiesSQL, func(rows *sql.Rows) (store.PendingActivity, error) {
		var (
			a                              store.PendingActivity
			attempts, maxAttempts, limited int64
			runAfter, created              int64
			lockedUntil                    sql.NullInt64
			input, heartbeat, options      []byte
		)
		err := rows.Scan(&a.TaskID, &a.Seq, &a.Activity, &a.Queue, &attempts, &maxAttempts, &a.LastError,
			&runAfter, &a.LockedBy, &lockedUntil, &input, &heartbeat, &options, &limited, &created)
		a.Attempts, a.MaxAttempts, a.RateLimited = int(attempts), int(maxAttempts), int(limited)
		a.RunAfter, a.LockedUntil, a.ScheduledAt = fromMicros(runAfter), nullTime(lockedUntil), fromMicros(created)
		a.Input, a.Heartbeat, a.Options = input, heartbeat, options
		return a, err
	}, sql.Named("run_id", runID))
	if err != nil {
		return nil, fmt.Errorf("list pending activities of run %s: %w", runID, err)
	}
	return acts, nil
}

const listPendingTimersSQL = `SELECT seq, fire_at FROM durable_timers WHERE run_id = @run_id ORDER BY fire_at, seq`

// ListPendingTimers implements store.Store.
func (s *Store) ListPendingTimers(ctx context.Context, runID string) ([]store.PendingTimer, error) {
	timers, err := queryAll(ctx, s.reader(), listPendingTimersSQL, func(rows *sql.Rows) (store.PendingTimer, error) {
		var (
			t  store.PendingTimer
			at int64
		)
		err := rows.Scan(&t.Seq, &at)
		t.FireAt = fromMicros(at)
		return t, err
	}, sql.Named("run_id", runID))
	if err != nil {
		return nil, fmt.Errorf("list pending timers of run %s: %w", runID, err)
	}
	return timers, nil
}

// Now implements store.Store: this machine's clock, to the microsecond the
// store keeps. It is the database's clock, the one every engine on the file
// shares, since they all run in this process (see the package doc).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("read the clock: %w", err)
	}
	return fromMicros(micros(time.Now())), nil
}

// queueStatsSQL counts tasks and timers per queue. A claim moves run_after
// to the end of its lease, so run_after <= now alone means ready.
const queueStatsSQL = `
WITH wt AS (
    SELECT queue,
        count(*) FILTER (WHERE run_after <= @now) AS ready,
        count(*) FILTER (WHERE locked_by IS NOT NULL AND locked_until > @now) AS running,
        count(*) FILTER (WHERE run_after > @now AND (locked_by IS NULL OR locked_until IS NULL OR locked_until <= @now)) AS waiting,
        min(run_after) FILTER (WHERE run_after <= @now) AS oldest_ready
    FROM durable_workflow_tasks
    GROUP BY queue
), at AS (
    SELECT queue,
        count(*) FILTER (WHERE run_after <= @now) AS ready,
        count(*) FILTER (WHERE locked_by IS NOT NULL AND locked_until > @now) AS running,
        count(*) FILTER (WHERE run_after > @now AND (locked_by IS NULL OR locked_until IS NULL OR locked_until <= @now)) AS waiting,
        min(run_after) FILTER (WHERE run_after <= @now) AS oldest_ready
    FROM durable_activity_tasks
    GROUP BY queue
), tm AS (
    SELECT queue, count(*) AS pending, min(fire_at) AS next_fire
    FROM durable_timers
    GROUP BY queue
)
SELECT q.queue,
    coalesce(wt.ready, 0), coalesce(wt.running, 0), coalesce(wt.waiting, 0), wt.oldest_ready,
    coalesce(at.ready, 0), coalesce(at.running, 0), coalesce(at.waiting, 0), at.oldest_ready,
    coalesce(tm.pending, 0), tm.next_fire
FROM (SELECT queue FROM wt UNION SELECT queue FROM at UNION SELECT queue FROM tm) q
LEFT JOIN wt ON wt.queue = q.queue
LEFT JOIN at ON at.queue = q.queue
LEFT JOIN tm ON tm.queue = q.queue
ORDER BY q.queue`

// QueueStats implements store.Store.
func (s *Store) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	stats, err := queryAll(ctx, s.reader(), queueStatsSQL, func(rows *sql.Rows) (store.QueueStats, error) {
		var (
			q                          store.QueueStats
			wReady, wRunning, wWaiting int64
			aReady, aRunning, aWaiting int64
			timers                     int64
			wOldest, aOldest, next     sql.NullInt64
		)
		err := rows.Scan(&q.Queue, &wReady, &wRunning, &wWaiting, &wOldest, &aReady, &aRunning, &aWaiting, &aOldest,
			&timers, &next)
		q.WorkflowTasks = store.TaskStats{Ready: int(wReady), Running: int(wRunning), Waiting: int(wWaiting), OldestReady: nullTime(wOldest)}
		q.ActivityTasks = store.TaskStats{Ready: int(aReady), Running: int(aRunning), Waiting: int(aWaiting), OldestReady: nullTime(aOldest)}
		q.Timers, q.NextTimer = int(timers), nullTime(next)
		return q, err
	}, sql.Named("now", micros(now)))
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return stats, nil
}

const deadLetterStatsSQL = `
SELECT k.kind, count(d.id), min(d.dead_lettered_at)
FROM (SELECT 'job' AS kind UNION ALL SELECT 'workflow') k
LEFT JOIN durable_dead_letters d ON d.kind = k.kind AND d.redriven_at IS NULL
GROUP BY k.kind
ORDER BY k.kind`

// DeadLetterStats implements store.Store.
func (s *Store) DeadLetterStats(ctx context.Context) ([]store.DeadLetterStats, error) {
	stats, err := queryAll(ctx, s.reader(), deadLetterStatsSQL, func(rows *sql.Rows) (store.DeadLetterStats, error) {
		var (
			d       store.DeadLetterStats
			pending int64
			oldest  sql.NullInt64
		)
		err := rows.Scan(&d.Kind, &pending, &oldest)
		d.Pending, d.OldestPending = int(pending), nullTime(oldest)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("dead letter stats: %w", err)
	}
	return stats, nil
}

// activityEndsSQL reads the latest @limit activity outcomes since @since,
// newest first, each with what ActivityStats needs: its activity's name
// and schedule time (from the latest ActivityScheduled of the same seq
// before it), its run's creation, and whether it is a copy. A redriven run
// begins with a copy of the failed run's history, times and all, so a
// copied event is older than its run; it is a copy if the dead letter
// redriven into the run has the same event at the same time, and is left
// out, so that each ending counts once, in the run where it happened.
const activityEndsSQL = `
WITH ends AS (
    SELECT run_id, event_id, type, attributes ->> '$.seq' AS seq, created_at
    FROM durable_events
    WHERE type IN ('activity_completed', 'activity_failed') AND created_at >= @since
    ORDER BY created_at DESC
    LIMIT @limit
), matched AS (
    SELECT e.*, (
        SELECT s.event_id FROM durable_events s
        WHERE s.run_id = e.run_id AND s.event_id < e.event_id AND s.type = 'activity_scheduled'
          AND s.attributes ->> '$.seq' = e.seq
        ORDER BY s.event_id DESC
        LIMIT 1
    ) AS scheduled_id
    FROM ends e
)
SELECT m.type, m.created_at, s.attributes ->> '$.activity', s.created_at, r.created_at,
    m.created_at < r.created_at AND EXISTS (
        SELECT 1 FROM durable_dead_letters dl
        JOIN durable_events o ON o.run_id = dl.run_id AND o.event_id = m.event_id
        WHERE dl.redrive_run_id = m.run_id AND o.created_at = m.created_at)
FROM matched m
LEFT JOIN durable_events s ON s.run_id = m.run_id AND s.event_id = m.scheduled_id
LEFT JOIN durable_runs r ON r.run_id = m.run_id`

// ActivityStats implements store.Store. The outcomes are read by one
// statement; they are summed up here.
func (s *Store) ActivityStats(ctx context.Context, in store.ActivityStatsParams) (store.ActivityReport, error) {
	if in.Limit <= 0 {
		in.Limit = 50_000
	}
	rep := store.ActivityReport{Since: in.Since}
	type times struct {
		completed, failed int
		secs              []float64 // of the completed ones
	}
	byActivity := map[string]*times{}
	read, oldest := 0, int64(math.MaxInt64)
	rows, err := s.reader().QueryContext(ctx, activityEndsSQL, sql.Named("since", micros(in.Since)), sql.Named("limit", in.Limit))
	if err != nil {
		return store.ActivityReport{}, fmt.Errorf("activity stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			typ                       string
			at                        int64
			activity                  sql.NullString
			scheduledAt, runCreatedAt sql.NullInt64
			copied                    sql.NullBool
		)
		if err := rows.Scan(&typ, &at, &activity, &scheduledAt, &runCreatedAt, &copied); err != nil {
			return store.ActivityReport{}, fmt.Errorf("activity stats: %w", err)
		}
		read, oldest = read+1, min(oldest, at)
		if !activity.Valid || !runCreatedAt.Valid || copied.Bool {
			continue
		}
		t := byActivity[activity.String]
		if t == nil {
			t = &times{}
			byActivity[activity.String] = t
		}
		if typ == "activity_failed" {
			t.failed++
			continue
		}
		t.completed++
		// From the schedule, or from the redrive of a copied schedule.
		t.secs = append(t.secs, float64(at-max(scheduledAt.Int64, runCreatedAt.Int64))/1e6)
	}
	if err := rows.Err(); err != nil {
		return store.ActivityReport{}, fmt.Errorf("activity stats: %w", err)
	}
	for name, t := range byActivity {
		a := store.ActivityStats{Activity: name, Completed: t.completed, Failed: t.failed}
		if len(t.secs) > 0 {
			slices.Sort(t.secs)
			sum := 0.0
			for _, v := range t.secs {
				sum += v
			}
			a.Mean = seconds(sum / float64(len(t.secs)))
			a.P50, a.P95 = seconds(percentile(t.secs, 0.5)), seconds(percentile(t.secs, 0.95))
		}
		rep.Activities = append(rep.Activities, a)
	}
	slices.SortFunc(rep.Activities, func(a, b store.ActivityStats) int {
		switch {
		case a.Activity < b.Activity:
			return -1
		case a.Activity > b.Activity:
			return 1
		}
		return 0
	})
	if rep.Capped = read >= in.Limit; rep.Capped && read > 0 {
		rep.Since = fromMicros(oldest)
	}
	return rep, nil
}

// percentile is Postgres's percentile_cont of sorted values: the value at
// fraction p of the way from the first to the last, interpolated.
func percentile(sorted []float64, p float64) float64 {
	pos := p * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// seconds converts a number of seconds to a duration.
func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

const listPendingDeadLetterIDsSQL = `
SELECT id FROM durable_dead_letters
WHERE redriven_at IS NULL AND (@kind = '' OR kind = @kind) AND (@type = '' OR type = @type)
ORDER BY id`

// ListPendingDeadLetterIDs implements store.Store.
func (s *Store) ListPendingDeadLetterIDs(ctx context.Context, kind, typ string) ([]int64, error) {
	ids, err := queryAll(ctx, s.reader(), listPendingDeadLetterIDsSQL, scanID, sql.Named("kind", kind), sql.Named("type", typ))
	if err != nil {
		return nil, fmt.Errorf("list pending dead letters: %w", err)
	}
	return ids, nil
}

// idleUntilSQL says whether a task is running or ready at @now, and when
// the earliest timer fires and the earliest task of each kind is due.
const idleUntilSQL = `
SELECT EXISTS (SELECT 1 FROM durable_workflow_tasks WHERE locked_by IS NOT NULL OR run_after <= @now)
        OR EXISTS (SELECT 1 FROM durable_activity_tasks WHERE locked_by IS NOT NULL OR run_after <= @now),
    (SELECT min(fire_at) FROM durable_timers),
    (SELECT min(run_after) FROM durable_workflow_tasks),
    (SELECT min(run_after) FROM durable_activity_tasks)`

// IdleUntil implements store.Store.
func (s *Store) IdleUntil(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var (
		busy bool
		dues [3]sql.NullInt64
	)
	if err := s.reader().QueryRowContext(ctx, idleUntilSQL, sql.Named("now", micros(now))).Scan(&busy, &dues[0], &dues[1], &dues[2]); err != nil {
		return time.Time{}, false, fmt.Errorf("read when the store is idle until: %w", err)
	}
	if busy {
		return time.Time{}, false, nil
	}
	var next *int64
	for _, d := range dues {
		if d.Valid && (next == nil || d.Int64 < *next) {
			next = &d.Int64
		}
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return fromMicros(*next), true, nil
}
