package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The reads in this file serve operators (the durable command), not the
// engine: they are Postgres-specific and not part of store.Store.

// RunSummary is one row of ListRuns: a run without its payloads.
type RunSummary struct {
	RunID        string     `json:"run_id"`
	WorkflowID   string     `json:"workflow_id"`
	WorkflowType string     `json:"workflow_type"`
	Queue        string     `json:"queue"`
	Status       string     `json:"status"`
	CreatedAt    time.Time  `json:"created_at"`
	ClosedAt     *time.Time `json:"closed_at"`
}

// ListRunsParams filter ListRuns. A zero field does not filter.
type ListRunsParams struct {
	// Status keeps runs with this status ("running", "completed", ...).
	Status string
	// WorkflowType keeps runs of this workflow type.
	WorkflowType string
	// WorkflowID keeps the runs of this workflow ID.
	WorkflowID string
	// Since keeps runs created at or after it.
	Since time.Time
	// Limit is the most runs returned. Default 100.
	Limit int
}

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
func (s *Store) ListRuns(ctx context.Context, in ListRunsParams) ([]RunSummary, error) {
	if in.Limit <= 0 {
		in.Limit = 100
	}
	rows, err := s.db.Query(ctx, listRunsSQL, pgx.NamedArgs{
		"status":        nullString(in.Status),
		"workflow_type": nullString(in.WorkflowType),
		"workflow_id":   nullString(in.WorkflowID),
		"since":         nullTime(in.Since),
		"limit":         in.Limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunSummary, error) {
		var r RunSummary
		err := row.Scan(&r.RunID, &r.WorkflowID, &r.WorkflowType, &r.Queue, &r.Status, &r.CreatedAt, &r.ClosedAt)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// PendingActivity is an activity of a run that has not finished: waiting for
// its first attempt, running, or waiting to be retried.
type PendingActivity struct {
	// TaskID identifies the activity task.
	TaskID int64 `json:"task_id"`
	// Seq is the activity's command sequence number in its run.
	Seq      int64  `json:"seq"`
	Activity string `json:"activity"`
	Queue    string `json:"queue"`
	// Attempts is how many attempts were started so far; 0 before the first.
	Attempts int `json:"attempts"`
	// MaxAttempts is the attempt budget; 0 means unlimited.
	MaxAttempts int `json:"max_attempts"`
	// LastError is the error of the last failed attempt, or empty.
	LastError string `json:"last_error,omitempty"`
	// RunAfter is when the next attempt may start. While an attempt runs it
	// is the end of that attempt's lease.
	RunAfter time.Time `json:"run_after"`
	// LockedBy names the worker running an attempt, or is empty.
	LockedBy string `json:"locked_by,omitempty"`
	// LockedUntil is when the running attempt's lease ends, if one runs.
	LockedUntil *time.Time `json:"locked_until,omitempty"`
	// Input is the activity's input: a payload, which people see only when
	// they ask for it.
	Input json.RawMessage `json:"input,omitempty"`
}

const listPendingActivitiesSQL = `
SELECT id, seq, activity, queue, attempt, max_attempts, coalesce(last_error, ''),
    run_after, coalesce(locked_by, ''), locked_until, input
FROM durable_activity_tasks
WHERE run_id = @run_id
ORDER BY seq, id`

// ListPendingActivities returns the run's unfinished activities in the order
// they were scheduled. An unknown run has none.
func (s *Store) ListPendingActivities(ctx context.Context, runID string) ([]PendingActivity, error) {
	rows, err := s.db.Query(ctx, listPendingActivitiesSQL, pgx.NamedArgs{"run_id": runID})
	if err != nil {
		return nil, fmt.Errorf("list pending activities of run %s: %w", runID, err)
	}
	acts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PendingActivity, error) {
		var a PendingActivity
		err := row.Scan(&a.TaskID, &a.Seq, &a.Activity, &a.Queue, &a.Attempts, &a.MaxAttempts, &a.LastError,
			&a.RunAfter, &a.LockedBy, &a.LockedUntil, &a.Input)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("list pending activities of run %s: %w", runID, err)
	}
	return acts, nil
}

// PendingTimer is a durable timer of a run that has not fired.
type PendingTimer struct {
	// Seq is the timer's command sequence number in its run.
	Seq    int64     `json:"seq"`
	FireAt time.Time `json:"fire_at"`
}

const listPendingTimersSQL = `
SELECT seq, fire_at
FROM durable_timers
WHERE run_id = @run_id
ORDER BY fire_at, seq`

// ListPendingTimers returns the run's timers that have not fired, earliest
// first. An unknown run has none.
func (s *Store) ListPendingTimers(ctx context.Context, runID string) ([]PendingTimer, error) {
	rows, err := s.db.Query(ctx, listPendingTimersSQL, pgx.NamedArgs{"run_id": runID})
	if err != nil {
		return nil, fmt.Errorf("list pending timers of run %s: %w", runID, err)
	}
	timers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PendingTimer])
	if err != nil {
		return nil, fmt.Errorf("list pending timers of run %s: %w", runID, err)
	}
	return timers, nil
}

// AppliedMigration is a row of durable_schema_migrations.
type AppliedMigration struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

const listAppliedMigrationsSQL = `
SELECT version, name, applied_at
FROM durable_schema_migrations
ORDER BY version`

// ListAppliedMigrations returns the migrations applied to the database, in
// version order; none for a database that was never migrated.
func (s *Store) ListAppliedMigrations(ctx context.Context) ([]AppliedMigration, error) {
	rows, err := s.db.Query(ctx, listAppliedMigrationsSQL)
	if err == nil {
		var ms []AppliedMigration
		ms, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AppliedMigration])
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
	b.WriteString(strings.TrimSpace(createMigrationsTable) + ";\n")
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
		b.WriteString("INSERT INTO durable_schema_migrations (version, name) VALUES (" +
			strconv.Itoa(m.Version) + ", '" + strings.ReplaceAll(m.Name, "'", "''") + "');\n")
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
