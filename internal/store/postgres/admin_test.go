package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// adminBundle is a store with three runs, created a minute apart from t0:
// "order-1" (Order, completed), "order-2" (Order, running, with an activity
// that failed once and a timer) and "mail-1" (Mail, running).
type adminBundle struct {
	ctx context.Context
	s   *postgres.Store
	t0  time.Time
	// runs maps workflow ID to run.
	runs map[string]store.Run
}

func adminSetup(t *testing.T) adminBundle {
	t.Helper()
	b := adminBundle{
		ctx:  t.Context(),
		s:    postgres.New(pgtest.Pool(t)),
		t0:   time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		runs: map[string]store.Run{},
	}
	for i, id := range []string{"order-1", "order-2", "mail-1"} {
		typ := "Order"
		if id == "mail-1" {
			typ = "Mail"
		}
		r, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
			RunID: uuid.NewString(), WorkflowID: id, WorkflowType: typ, Queue: "q",
			Input: []byte(`{"secret":true}`), Now: b.t0.Add(time.Duration(i) * time.Minute),
		})
		require.NoError(t, err)
		b.runs[id] = r
	}

	// Claim all three workflow tasks; close order-1, give order-2 an
	// activity and a timer.
	now := b.t0.Add(10 * time.Minute)
	tasks, err := b.s.ClaimWorkflowTasks(b.ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 3)
	for _, task := range tasks {
		p := store.CommitWorkflowTaskParams{RunID: task.RunID, Token: task.Token, ProcessedEventID: 1, Now: now}
		switch task.WorkflowID {
		case "order-1":
			p.Events = []history.Attributes{history.WorkflowCompleted{Result: []byte(`1`)}}
			p.Close = &store.CloseRun{Status: store.StatusCompleted, Result: []byte(`1`)}
		case "order-2":
			p.Events = []history.Attributes{
				history.ActivityScheduled{Seq: 1, Activity: "Charge", Queue: "q", Input: []byte(`{"card":"4242"}`)},
				history.TimerStarted{Seq: 2, FireAt: now.Add(time.Hour)},
			}
			p.Activities = []store.NewActivityTask{{
				Seq: 1, Activity: "Charge", Queue: "q", Input: []byte(`{"card":"4242"}`),
				IdempotencyKey: task.RunID + ":1", MaxAttempts: 5, Lease: time.Minute, RunAfter: now,
			}}
			p.Timers = []store.NewTimer{{Seq: 2, FireAt: now.Add(time.Hour)}}
		default:
			continue
		}
		_, err := b.s.CommitWorkflowTask(b.ctx, p)
		require.NoError(t, err)
	}

	acts, err := b.s.ClaimActivityTasks(b.ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Now: now})
	require.NoError(t, err)
	require.Len(t, acts, 1)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: acts[0].ID, Attempt: acts[0].Attempt, RunAfter: now.Add(30 * time.Second), Error: "card network down", Now: now,
	}))
	return b
}

func TestListRuns(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)

	tests := []struct {
		name string
		in   postgres.ListRunsParams
		want []string // workflow IDs, newest first
	}{
		{"All", postgres.ListRunsParams{}, []string{"mail-1", "order-2", "order-1"}},
		{"Status", postgres.ListRunsParams{Status: store.StatusRunning}, []string{"mail-1", "order-2"}},
		{"StatusCompleted", postgres.ListRunsParams{Status: store.StatusCompleted}, []string{"order-1"}},
		{"StatusNone", postgres.ListRunsParams{Status: "canceled"}, nil},
		{"Type", postgres.ListRunsParams{WorkflowType: "Order"}, []string{"order-2", "order-1"}},
		{"WorkflowID", postgres.ListRunsParams{WorkflowID: "order-2"}, []string{"order-2"}},
		{"TypeAndStatus", postgres.ListRunsParams{WorkflowType: "Order", Status: store.StatusRunning}, []string{"order-2"}},
		{"Since", postgres.ListRunsParams{Since: b.t0.Add(time.Minute)}, []string{"mail-1", "order-2"}},
		{"SinceLater", postgres.ListRunsParams{Since: b.t0.Add(time.Hour)}, nil},
		{"Limit", postgres.ListRunsParams{Limit: 2}, []string{"mail-1", "order-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runs, err := b.s.ListRuns(b.ctx, tt.in)
			require.NoError(t, err)
			var got []string
			for _, r := range runs {
				got = append(got, r.WorkflowID)
			}
			require.Equal(t, tt.want, got)
		})
	}

	t.Run("Fields", func(t *testing.T) {
		t.Parallel()
		runs, err := b.s.ListRuns(b.ctx, postgres.ListRunsParams{WorkflowType: "Order"})
		require.NoError(t, err)
		require.Len(t, runs, 2)
		closed, open := runs[1], runs[0]
		want := b.runs["order-1"]
		require.Equal(t, want.RunID, closed.RunID)
		require.Equal(t, "order-1", closed.WorkflowID)
		require.Equal(t, "Order", closed.WorkflowType)
		require.Equal(t, "q", closed.Queue)
		require.Equal(t, store.StatusCompleted, closed.Status)
		require.True(t, b.t0.Equal(closed.CreatedAt), "created %v, want %v", closed.CreatedAt, b.t0)
		require.NotNil(t, closed.ClosedAt)
		require.True(t, b.t0.Add(10*time.Minute).Equal(*closed.ClosedAt), "closed %v", *closed.ClosedAt)
		require.Equal(t, store.StatusRunning, open.Status)
		require.Nil(t, open.ClosedAt)
	})
}

func TestListPendingActivities(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)

	acts, err := b.s.ListPendingActivities(b.ctx, b.runs["order-2"].RunID)
	require.NoError(t, err)
	require.Len(t, acts, 1)
	a := acts[0]
	require.NotZero(t, a.TaskID)
	require.Equal(t, int64(1), a.Seq)
	require.Equal(t, "Charge", a.Activity)
	require.Equal(t, "q", a.Queue)
	require.Equal(t, 1, a.Attempts)
	require.Equal(t, 5, a.MaxAttempts)
	require.Equal(t, "card network down", a.LastError)
	require.True(t, b.t0.Add(10*time.Minute+30*time.Second).Equal(a.RunAfter), "run after %v", a.RunAfter)
	require.Empty(t, a.LockedBy, "a retried activity is not held")
	require.Nil(t, a.LockedUntil)
	require.JSONEq(t, `{"card":"4242"}`, string(a.Input))

	for _, id := range []string{"order-1", "mail-1"} {
		acts, err := b.s.ListPendingActivities(b.ctx, b.runs[id].RunID)
		require.NoError(t, err)
		require.Empty(t, acts, id)
	}
	acts, err = b.s.ListPendingActivities(b.ctx, uuid.NewString())
	require.NoError(t, err)
	require.Empty(t, acts, "an unknown run has no activities")

	// A claimed activity shows its holder.
	now := b.t0.Add(time.Hour)
	_, err = b.s.ClaimActivityTasks(b.ctx, store.ClaimParams{Queue: "q", WorkerID: "host:1", Limit: 10, Now: now})
	require.NoError(t, err)
	acts, err = b.s.ListPendingActivities(b.ctx, b.runs["order-2"].RunID)
	require.NoError(t, err)
	require.Len(t, acts, 1)
	require.Equal(t, 2, acts[0].Attempts)
	require.Equal(t, "host:1", acts[0].LockedBy)
	require.NotNil(t, acts[0].LockedUntil)
	require.True(t, now.Add(time.Minute).Equal(*acts[0].LockedUntil), "locked until %v", *acts[0].LockedUntil)
}

func TestListPendingTimers(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)

	timers, err := b.s.ListPendingTimers(b.ctx, b.runs["order-2"].RunID)
	require.NoError(t, err)
	require.Len(t, timers, 1)
	require.Equal(t, int64(2), timers[0].Seq)
	require.True(t, b.t0.Add(70*time.Minute).Equal(timers[0].FireAt), "fire at %v", timers[0].FireAt)

	timers, err = b.s.ListPendingTimers(b.ctx, b.runs["mail-1"].RunID)
	require.NoError(t, err)
	require.Empty(t, timers)
}

func TestListAppliedMigrations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    func(t *testing.T) *postgres.Store
		want []int
	}{
		{"Migrated", func(t *testing.T) *postgres.Store { return postgres.New(pgtest.Pool(t)) }, allVersions()},
		{"Empty", func(t *testing.T) *postgres.Store { return postgres.New(emptyDatabase(t)) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := tt.s(t).ListAppliedMigrations(t.Context())
			require.NoError(t, err)
			var got []int
			for _, m := range ms {
				got = append(got, m.Version)
				require.NotEmpty(t, m.Name)
				require.False(t, m.AppliedAt.IsZero())
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func allVersions() []int {
	var vs []int
	for _, m := range postgres.Migrations() {
		vs = append(vs, m.Version)
	}
	return vs
}

func TestMigrationScript(t *testing.T) {
	t.Parallel()
	script := postgres.MigrationScript(0)
	require.Contains(t, script, "CREATE TABLE durable_runs")
	require.Contains(t, script, "durable_schema_migrations")
	require.NotContains(t, postgres.MigrationScript(postgres.SchemaVersion()), "BEGIN;", "nothing is above the last version")

	// The script brings an empty database to where Migrate would.
	pool := emptyDatabase(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, script)
	require.NoError(t, err)
	v, err := postgres.CurrentVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, postgres.SchemaVersion(), v)
	applied, err := postgres.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, applied, "Migrate finds nothing left to apply")
	require.Equal(t, tableNames(t, pgtest.Pool(t)), tableNames(t, pool), "the script makes the tables Migrate makes")
}

// tableNames returns the names of the tables in pool's public schema.
func tableNames(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, names)
	return names
}
