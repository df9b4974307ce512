package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/durable-go/durable/internal/store"
)

// The reads in this file serve operators (the durable command), not the
// engine: they are Postgres-specific and not part of store.Store.

const listRunsSQL = `
SELECT run_id::text, workflow_id, workflow_type, queue, status, created_at, closed_at
FROM durable_runs
WHERE (@status::text IS NULL OR status = @status)
  AND (@workflow_type::text IS NULL OR workflow_type = @workflow_type)
  AND (@workflow_id::text IS NULL OR workflow_id = @workflow_id)
  AND (@since::timestamptz IS NULL OR created_at >= @since)
ORDER BY created_at DESC, run_id DESC
LIMIT @limit`

// ListRuns returns the runs that match in, newest first.
func (s *Store) ListRuns(ctx context.Context, in store.ListRunsParams) ([]store.RunSummary, error) {
	if in.Limit <= 0 {
		in.Limit = 100
	}
	rows, err := s.db.Query(ctx, listRunsSQL, namedArgs{
		"status":        nullString(in.Status),
		"workflow_type": nullString(in.WorkflowType),
		"workflow_id":   nullString(in.WorkflowID),
		"since":         nullTime(in.Since),
		"limit":         in.Limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.RunSummary, error) {
		var r store.RunSummary
		err := row.Scan(&r.RunID, &r.WorkflowID, &r.WorkflowType, &r.Queue, &r.Status, &r.CreatedAt, &r.ClosedAt)
		return r, err
	})
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

// ListPendingActivities returns the run's unfinished activities in the order
// they were scheduled. An unknown run has none.
func (s *Store) ListPendingActivities(ctx context.Context, runID string) ([]store.PendingActivity, error) {
	rows, err := s.db.Query(ctx, listPendingActivitiesSQL, namedArgs{"run_id": runID})
	if err != nil {
		return nil, fmt.Errorf("list pending activities of run %s: %w", runID, err)
	}
	acts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PendingActivity, error) {
		var a store.PendingActivity
		err := row.Scan(&a.TaskID, &a.Seq, &a.Activity, &a.Queue, &a.Attempts, &a.MaxAttempts, &a.LastError,
			&a.RunAfter, &a.LockedBy, &a.LockedUntil, &a.Input, &a.Heartbeat, (*[]byte)(&a.Options), &a.RateLimited, &a.ScheduledAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("list pending activities of run %s: %w", runID, err)
	}
	return acts, nil
}

const listPendingTimersSQL = `
SELECT seq, fire_at
FROM durable_timers
WHERE run_id = @run_id
ORDER BY fire_at, seq`

// ListPendingTimers returns the run's timers that have not fired, earliest
// first. An unknown run has none.
func (s *Store) ListPendingTimers(ctx context.Context, runID string) ([]store.PendingTimer, error) {
	rows, err := s.db.Query(ctx, listPendingTimersSQL, namedArgs{"run_id": runID})
	if err != nil {
		return nil, fmt.Errorf("list pending timers of run %s: %w", runID, err)
	}
	timers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.PendingTimer])
	if err != nil {
		return nil, fmt.Errorf("list pending timers of run %s: %w", runID, err)
	}
	return timers, nil
}

const listAppliedMigrationsSQL = `
SELECT version, name, applied_at
FROM durable_schema_migrations
ORDER BY version`

// ListAppliedMigrations returns the migrations applied to the database, in
// version order; none for a database that was never migrated.
func (s *Store) ListAppliedMigrations(ctx context.Context) ([]store.AppliedMigration, error) {
	rows, err := s.db.Query(ctx, listAppliedMigrationsSQL)
	if err == nil {
		var ms []store.AppliedMigration
		ms, err = pgx.CollectRows(rows, pgx.RowToStructByPos[store.AppliedMigration])
		if err == nil {
			return ms, nil
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return nil, nil
	}
	return nil, fmt.Errorf("list applied migrations: %w", err)
}

// MigrationScript returns the embedded migrations above version after as one
// SQL script, for people who apply migrations with their own tools. As
// Migrate does, it creates durable_schema_migrations if needed and runs each
// migration in a transaction of its own that also records it there, so that
// engine.New with SkipMigrate and CurrentVersion see the schema as current.
func MigrationScript(after int) string {
	var b strings.Builder
	b.WriteString("-- durable schema migrations, applied in order.\n")
	b.WriteString(strings.TrimSpace(CreateMigrationsTable) + ";\n")
	for _, m := range Migrations() {
		if m.Version <= after {
			continue
		}
		b.WriteString("\n-- " + m.Name + ".sql\nBEGIN;\n\n")
		sql := strings.TrimSpace(m.SQL)
		if !strings.HasSuffix(sql, ";") {
			sql += ";"
		}
		b.WriteString(sql + "\n\n")
		// The values are the embedded file's version and name; the name is
		// quoted as a SQL literal all the same.
		name := "'" + strings.ReplaceAll(m.Name, "'", "''") + "'"
		if m.Version < oldestEngineSince {
			b.WriteString("INSERT INTO durable_schema_migrations (version, name) VALUES (" + strconv.Itoa(m.Version) + ", " + name + ");\n")
		} else {
			b.WriteString("INSERT INTO durable_schema_migrations (version, name, oldest_engine) VALUES (" +
				strconv.Itoa(m.Version) + ", " + name + ", " + strconv.Itoa(m.OldestEngine) + ");\n")
		}
		b.WriteString("COMMIT;\n")
	}
	return b.String()
}

// nullString passes "" as SQL NULL, for optional filters.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullTime passes the zero time as SQL NULL, for optional filters.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

const nowSQL = `SELECT now()`

// Now returns the database server's clock, for operator reads that have no
// engine clock of their own to compare against.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.db.QueryRow(ctx, nowSQL).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
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

// QueueStats returns, for every queue with tasks or timers, in name order,
// its ready, running and waiting tasks and pending timers as of now.
func (s *Store) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	rows, err := s.db.Query(ctx, queueStatsSQL, namedArgs{"now": now})
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	qs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.QueueStats, error) {
		var q store.QueueStats
		w, a := &q.WorkflowTasks, &q.ActivityTasks
		err := row.Scan(&q.Queue, &w.Ready, &w.Running, &w.Waiting, &w.OldestReady,
			&a.Ready, &a.Running, &a.Waiting, &a.OldestReady, &q.Timers, &q.NextTimer)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return qs, nil
}

const deadLetterStatsSQL = `
SELECT k.kind, count(d.id), min(d.dead_lettered_at)
FROM unnest(@kinds::text[]) AS k(kind)
LEFT JOIN durable_dead_letters d ON d.kind = k.kind AND d.redriven_at IS NULL
GROUP BY k.kind
ORDER BY k.kind`

// DeadLetterStats returns the pending dead letters of each kind, jobs
// first; a kind with none has a row all the same.
func (s *Store) DeadLetterStats(ctx context.Context) ([]store.DeadLetterStats, error) {
	rows, err := s.db.Query(ctx, deadLetterStatsSQL, namedArgs{"kinds": []string{store.DeadJob, store.DeadWorkflow}})
	if err != nil {
		return nil, fmt.Errorf("dead letter stats: %w", err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.DeadLetterStats])
	if err != nil {
		return nil, fmt.Errorf("dead letter stats: %w", err)
	}
	return ds, nil
}

// activityStatsSQL reads the latest @limit activity_completed and
// activity_failed events since @since, by their index (newest first), and
// looks up each one's activity_scheduled event (same run, same seq, the
// latest before it) for the activity's name and start, and its run's
// creation, by their keys. Every step is a lookup by key, so the plan does
// not depend on table statistics: without them, the join it replaces read
// the whole events index for each outcome (docs/performance.md).
//
// A redriven run begins with a copy of the failed run's history, times and
// all, so a copied event is older than its run; the NOT EXISTS, checked
// only for such events, leaves the copies out, so that each ending counts
// once, in the run where it happened.
const activityStatsSQL = `
WITH ends AS (
    SELECT run_id, event_id, type, (attributes->>'seq')::bigint AS seq, created_at
    FROM durable_events
    WHERE type IN ('activity_completed', 'activity_failed') AND created_at >= @since
    ORDER BY created_at DESC
    LIMIT @limit
), timed AS (
    SELECT s.activity, e.type,
        extract(epoch FROM e.created_at - greatest(s.created_at, r.created_at))::float8 AS secs
    FROM ends e
    CROSS JOIN LATERAL (
        SELECT created_at FROM durable_runs WHERE run_id = e.run_id LIMIT 1
    ) r
    CROSS JOIN LATERAL (
        SELECT attributes->>'activity' AS activity, created_at
        FROM durable_events
        WHERE run_id = e.run_id AND event_id < e.event_id AND type = 'activity_scheduled'
          AND (attributes->>'seq')::bigint = e.seq
        ORDER BY event_id DESC
        LIMIT 1
    ) s
    WHERE e.created_at >= r.created_at OR NOT EXISTS (
        SELECT 1 FROM durable_dead_letters dl
        JOIN durable_events o ON o.run_id = dl.run_id AND o.event_id = e.event_id
        WHERE dl.redrive_run_id = e.run_id AND o.created_at = e.created_at)
), stats AS (
    SELECT activity,
        count(*) FILTER (WHERE type = 'activity_completed') AS completed,
        count(*) FILTER (WHERE type = 'activity_failed') AS failed,
        avg(secs) FILTER (WHERE type = 'activity_completed') AS mean,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) FILTER (WHERE type = 'activity_completed') AS p50,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY secs) FILTER (WHERE type = 'activity_completed') AS p95
    FROM timed
    GROUP BY activity
)
SELECT n.read, n.oldest, stats.activity, coalesce(stats.completed, 0), coalesce(stats.failed, 0),
    stats.mean, stats.p50, stats.p95
FROM (SELECT count(*) AS read, min(created_at) AS oldest FROM ends) n
LEFT JOIN stats ON true
ORDER BY stats.activity`

// activityStatsPlanSQL sets, for the transaction of activityStatsSQL, what
// a planner without table statistics gets wrong there: it would read the
// whole window's outcomes by a bitmap scan and sort them, instead of the
// latest @limit in the index's order (700 ms instead of 350 ms at 200,000
// runs, docs/performance.md), and its cost guesses, large, would turn JIT
// compilation on, which takes longer than the query (330 ms of 780).
const activityStatsPlanSQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// ActivityStats returns, per activity type in name order, how many
// activities completed or failed for good at or after in.Since, and how long
// the completed ones took; of the latest in.Limit outcomes at most. On a
// store bound to a caller's transaction (WithTx), the planner settings of
// activityStatsPlanSQL last until that transaction ends.
func (s *Store) ActivityStats(ctx context.Context, in store.ActivityStatsParams) (store.ActivityReport, error) {
	if in.Limit <= 0 {
		in.Limit = 50_000
	}
	rep := store.ActivityReport{Since: in.Since}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, activityStatsPlanSQL); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, activityStatsSQL, namedArgs{"since": in.Since, "limit": in.Limit})
		if err != nil {
			return err
		}
		var (
			read           int
			oldest         *time.Time
			a              store.ActivityStats
			name           *string
			mean, p50, p95 *float64
		)
		_, err = pgx.ForEachRow(rows, []any{&read, &oldest, &name, &a.Completed, &a.Failed, &mean, &p50, &p95}, func() error {
			if name != nil { // else the one row is the count alone: no outcome counted
				a.Activity, a.Mean, a.P50, a.P95 = *name, seconds(mean), seconds(p50), seconds(p95)
				rep.Activities = append(rep.Activities, a)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if rep.Capped = read >= in.Limit; rep.Capped && oldest != nil {
			rep.Since = *oldest
		}
		return nil
	})
	if err != nil {
		return store.ActivityReport{}, fmt.Errorf("activity stats: %w", err)
	}
	return rep, nil
}

// seconds converts a nullable number of seconds to a duration; NULL is zero.
func seconds(f *float64) time.Duration {
	if f == nil {
		return 0
	}
	return time.Duration(*f * float64(time.Second))
}

const listPendingDeadLetterIDsSQL = `
SELECT id FROM durable_dead_letters
WHERE redriven_at IS NULL
  AND (@kind::text IS NULL OR kind = @kind)
  AND (@type::text IS NULL OR type = @type)
ORDER BY id`

// ListPendingDeadLetterIDs returns the IDs of every dead letter not redriven
// yet, of kind and type if they are not empty, oldest first.
func (s *Store) ListPendingDeadLetterIDs(ctx context.Context, kind, typ string) ([]int64, error) {
	rows, err := s.db.Query(ctx, listPendingDeadLetterIDsSQL, namedArgs{"kind": nullString(kind), "type": nullString(typ)})
	if err != nil {
		return nil, fmt.Errorf("list pending dead letters: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list pending dead letters: %w", err)
	}
	return ids, nil
}

// idleUntilSQL returns, when no task is running or ready, the earliest
// time anything becomes due; otherwise NULL.
const idleUntilSQL = `
SELECT CASE WHEN EXISTS (SELECT 1 FROM durable_workflow_tasks WHERE locked_by IS NOT NULL OR run_after <= $1)
              OR EXISTS (SELECT 1 FROM durable_activity_tasks WHERE locked_by IS NOT NULL OR run_after <= $1)
            THEN NULL
            ELSE least((SELECT min(fire_at) FROM durable_timers),
                       (SELECT min(run_after) FROM durable_workflow_tasks),
                       (SELECT min(run_after) FROM durable_activity_tasks))
       END`

// IdleUntil implements store.Store.
func (s *Store) IdleUntil(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var next *time.Time
	if err := s.db.QueryRow(ctx, idleUntilSQL, now).Scan(&next); err != nil || next == nil {
		return time.Time{}, false, err
	}
	return *next, true, nil
}
