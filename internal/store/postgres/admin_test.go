package postgres_test

import (
	"context"
	"fmt"
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

// ListRuns is specified by storetest (testListRunsFiltersNewestFirst).

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
	scripted, err := postgres.New(pool).SchemaVersion(ctx)
	require.NoError(t, err)
	migrated, err := postgres.New(pgtest.Pool(t)).SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, migrated, scripted, "and records the oldest engine each migration allows, as Migrate does")
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

func TestQueueStats(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	at := func(d time.Duration) *time.Time { x := b.t0.Add(d); return &x }

	tests := []struct {
		name string
		now  time.Time
		want []store.QueueStats
	}{
		{
			// mail-1's workflow task is claimed until t0+11m; order-2's
			// activity waits to retry at t0+10m30s.
			"WhileClaimed", b.t0.Add(10 * time.Minute), []store.QueueStats{{
				Queue:         "q",
				WorkflowTasks: store.TaskStats{Running: 1},
				ActivityTasks: store.TaskStats{Waiting: 1},
				Timers:        1, NextTimer: at(70 * time.Minute),
			}},
		},
		{
			"LeaseRanOut", b.t0.Add(20 * time.Minute), []store.QueueStats{{
				Queue:         "q",
				WorkflowTasks: store.TaskStats{Ready: 1, OldestReady: at(11 * time.Minute)},
				ActivityTasks: store.TaskStats{Ready: 1, OldestReady: at(10*time.Minute + 30*time.Second)},
				Timers:        1, NextTimer: at(70 * time.Minute),
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := b.s.QueueStats(b.ctx, tt.now)
			require.NoError(t, err)
			requireQueueStats(t, tt.want, got)
		})
	}

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		got, err := postgres.New(pgtest.Pool(t)).QueueStats(t.Context(), b.t0)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

// requireQueueStats compares queue stats, times by instant.
func requireQueueStats(t *testing.T, want, got []store.QueueStats) {
	t.Helper()
	require.Len(t, got, len(want), "%+v", got)
	sameTime := func(want, got *time.Time, what string) {
		if want == nil {
			require.Nil(t, got, what)
			return
		}
		require.NotNil(t, got, what)
		require.True(t, want.Equal(*got), "%s: got %v, want %v", what, *got, *want)
	}
	for i := range want {
		w, g := want[i], got[i]
		sameTime(w.WorkflowTasks.OldestReady, g.WorkflowTasks.OldestReady, w.Queue+" workflow tasks' oldest ready")
		sameTime(w.ActivityTasks.OldestReady, g.ActivityTasks.OldestReady, w.Queue+" activity tasks' oldest ready")
		sameTime(w.NextTimer, g.NextTimer, w.Queue+" next timer")
		w.WorkflowTasks.OldestReady, g.WorkflowTasks.OldestReady = nil, nil
		w.ActivityTasks.OldestReady, g.ActivityTasks.OldestReady = nil, nil
		w.NextTimer, g.NextTimer = nil, nil
		require.Equal(t, w, g)
	}
}

func TestDeadLetterStats(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)

	got, err := b.s.DeadLetterStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.DeadLetterStats{{Kind: store.DeadJob}, {Kind: store.DeadWorkflow}}, got, "every kind has a row")

	_, err = b.s.Pool().Exec(b.ctx, `
INSERT INTO durable_dead_letters (kind, type, queue, payload, attempts, last_error, first_failed_at, dead_lettered_at, redriven_at)
VALUES ('job', 'Ship', 'q', '1', 3, 'x', $1, $1, NULL),
       ('job', 'Ship', 'q', '2', 3, 'x', $2, $2, NULL),
       ('job', 'Mail', 'q', '3', 3, 'x', $3, $3, $2),
       ('workflow', 'Order', 'q', '4', 1, 'x', $4, $4, NULL)`,
		b.t0, b.t0.Add(time.Minute), b.t0.Add(-time.Minute), b.t0.Add(2*time.Minute))
	require.NoError(t, err)

	got, err = b.s.DeadLetterStats(b.ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, store.DeadJob, got[0].Kind)
	require.Equal(t, 2, got[0].Pending, "the redriven one does not count")
	require.NotNil(t, got[0].OldestPending)
	require.True(t, b.t0.Equal(*got[0].OldestPending), "oldest job %v", *got[0].OldestPending)
	require.Equal(t, store.DeadWorkflow, got[1].Kind)
	require.Equal(t, 1, got[1].Pending)
	require.NotNil(t, got[1].OldestPending)
	require.True(t, b.t0.Add(2*time.Minute).Equal(*got[1].OldestPending), "oldest workflow %v", *got[1].OldestPending)

	ids, err := b.s.ListPendingDeadLetterIDs(b.ctx, "", "")
	require.NoError(t, err)
	require.Len(t, ids, 3)
	require.IsIncreasing(t, ids, "oldest first")
	for _, tt := range []struct {
		kind, typ string
		want      int
	}{{store.DeadJob, "", 2}, {store.DeadWorkflow, "", 1}, {"", "Ship", 2}, {"", "Mail", 0}, {store.DeadWorkflow, "Ship", 0}} {
		ids, err := b.s.ListPendingDeadLetterIDs(b.ctx, tt.kind, tt.typ)
		require.NoError(t, err)
		require.Len(t, ids, tt.want, "kind %q type %q", tt.kind, tt.typ)
	}
}

// TestActivityStats runs one workflow by hand: at t0 it schedules A (seq 1
// and 2) and B (seq 3); A:1 completes at t0+2s, B fails at t0+3s, A:2
// completes at t0+4s, the run fails at t0+5s and is redriven at t0+10s,
// where B completes at t0+12s.
func TestActivityStats(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "stats-1", WorkflowType: "W", Queue: "s", Input: []byte(`1`), Now: t0,
	})
	require.NoError(t, err)

	claimWorkflow := func(now time.Time) store.WorkflowTask {
		t.Helper()
		tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "s", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		return tasks[0]
	}
	task := func(runID string, a history.ActivityScheduled, now time.Time) store.NewActivityTask {
		return store.NewActivityTask{
			Seq: a.Seq, Activity: a.Activity, Queue: "s", Input: a.Input,
			IdempotencyKey: fmt.Sprintf("%s:%d", runID, a.Seq), Lease: time.Minute, RunAfter: now,
		}
	}
	wt := claimWorkflow(t0)
	p := store.CommitWorkflowTaskParams{RunID: run.RunID, Token: wt.Token, ProcessedEventID: 1, Now: t0}
	for i, name := range []string{"A", "A", "B"} {
		a := history.ActivityScheduled{Seq: int64(i + 1), Activity: name, Queue: "s", Input: []byte(`0`)}
		p.Events = append(p.Events, a)
		p.Activities = append(p.Activities, task(run.RunID, a, t0))
	}
	_, err = s.CommitWorkflowTask(ctx, p)
	require.NoError(t, err)

	acts, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "s", WorkerID: "w", Limit: 10, Now: sec(1)})
	require.NoError(t, err)
	require.Len(t, acts, 3)
	ends := map[int64]struct {
		at    time.Time
		event history.Attributes
	}{
		1: {sec(2), history.ActivityCompleted{Seq: 1, Result: []byte(`1`), Attempt: 1}},
		3: {sec(3), history.ActivityFailed{Seq: 3, Failure: history.Failure{Message: "no", Class: "permanent", Attempts: 1}}},
		2: {sec(4), history.ActivityCompleted{Seq: 2, Result: []byte(`2`), Attempt: 1}},
	}
	for _, seq := range []int64{1, 3, 2} {
		for _, a := range acts {
			if a.Seq == seq {
				_, err := s.ResolveActivity(ctx, store.ResolveActivityParams{TaskID: a.ID, Attempt: a.Attempt, Event: ends[seq].event, Now: ends[seq].at})
				require.NoError(t, err)
			}
		}
	}

	wantA := store.ActivityStats{Activity: "A", Completed: 2, Mean: 3 * time.Second, P50: 3 * time.Second, P95: 3900 * time.Millisecond}
	wantB := store.ActivityStats{Activity: "B", Failed: 1}
	check := func(name string, since time.Time, want ...store.ActivityStats) {
		t.Helper()
		rep, err := s.ActivityStats(ctx, store.ActivityStatsParams{Since: since})
		require.NoError(t, err)
		require.False(t, rep.Capped, name)
		require.Equal(t, since, rep.Since, name)
		got := rep.Activities
		require.Len(t, got, len(want), "%s: %+v", name, got)
		for i := range want {
			require.Equal(t, want[i].Activity, got[i].Activity, name)
			require.Equal(t, want[i].Completed, got[i].Completed, "%s: %s completed", name, want[i].Activity)
			require.Equal(t, want[i].Failed, got[i].Failed, "%s: %s failed", name, want[i].Activity)
			for _, d := range [][2]time.Duration{{want[i].Mean, got[i].Mean}, {want[i].P50, got[i].P50}, {want[i].P95, got[i].P95}} {
				require.InDelta(t, d[0], d[1], float64(time.Millisecond), "%s: %s durations %+v", name, want[i].Activity, got[i])
			}
		}
	}
	check("All", t0, wantA, wantB)
	check("SinceInclusive", sec(3),
		store.ActivityStats{Activity: "A", Completed: 1, Mean: 4 * time.Second, P50: 4 * time.Second, P95: 4 * time.Second}, wantB)
	check("None", sec(5))

	// The run fails and is redriven: the new run starts with a copy of
	// events 1 to 5 (A:1's completion among them), which must not count twice.
	wt = claimWorkflow(sec(5))
	f := history.Failure{Message: "B failed"}
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: wt.Token, ProcessedEventID: 7, Now: sec(5),
		Events: []history.Attributes{history.WorkflowFailed{Failure: f}},
		Close:  &store.CloseRun{Status: store.StatusFailed, Failure: &f},
	})
	require.NoError(t, err)
	ds, err := s.ListDeadLetters(ctx, store.DeadLetterFilter{Kind: store.DeadWorkflow})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	res, err := s.RedriveDeadLetter(ctx, store.RedriveParams{
		ID: ds[0].ID, Now: sec(10), NewRunID: uuid.NewString(),
		Task: func(runID string, a history.ActivityScheduled) (store.NewActivityTask, error) {
			return task(runID, a, sec(10)), nil
		},
	})
	require.NoError(t, err)
	require.True(t, res.Redriven)
	check("Redriven", t0, wantA, wantB)

	acts, err = s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "s", WorkerID: "w", Limit: 10, Now: sec(11)})
	require.NoError(t, err)
	require.Len(t, acts, 1)
	require.Equal(t, res.RunID, acts[0].RunID)
	_, err = s.ResolveActivity(ctx, store.ResolveActivityParams{
		TaskID: acts[0].ID, Attempt: acts[0].Attempt, Now: sec(12),
		Event: history.ActivityCompleted{Seq: 3, Result: []byte(`3`), Attempt: 1},
	})
	require.NoError(t, err)
	check("RedrivenCompleted", t0, wantA,
		store.ActivityStats{Activity: "B", Completed: 1, Failed: 1, Mean: 2 * time.Second, P50: 2 * time.Second, P95: 2 * time.Second})
}

func TestNow(t *testing.T) {
	t.Parallel()
	now, err := postgres.New(pgtest.Pool(t)).Now(t.Context())
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), now, time.Minute, "the database's clock")
}

// finishedRunsSQL inserts @n finished runs, one every 432 ms from @t0, each
// with two activities: SendEmail completes, ChargeCard completes, or fails
// in every 50th run.
const finishedRunsSQL = `
WITH runs AS (
    INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, result,
        next_event_id, processed_event_id, created_at, updated_at, closed_at)
    SELECT md5('run' || i)::uuid, 'wf-' || i, 'Onboard', 'default', 'completed', '{}', '{}', 7, 6,
        @t0::timestamptz + i * interval '432 ms', @t0::timestamptz + i * interval '432 ms' + interval '2 s',
        @t0::timestamptz + i * interval '432 ms' + interval '2 s'
    FROM generate_series(1, @n::int) i
    RETURNING 1
)
INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
SELECT md5('run' || i)::uuid, e.id, e.type, e.attrs::jsonb, @t0::timestamptz + i * interval '432 ms' + e.off * interval '400 ms'
FROM generate_series(1, @n::int) i
CROSS JOIN LATERAL (VALUES
    (1, 'workflow_started', '{"workflow_type":"Onboard","workflow_id":"wf","queue":"default","input":{}}', 0),
    (2, 'activity_scheduled', '{"seq":1,"activity":"SendEmail","queue":"default","input":{}}', 0),
    (3, 'activity_completed', '{"seq":1,"result":{},"attempt":1}', 1),
    (4, 'activity_scheduled', '{"seq":2,"activity":"ChargeCard","queue":"default","input":{}}', 2),
    (5, CASE WHEN i % 50 = 0 THEN 'activity_failed' ELSE 'activity_completed' END,
        CASE WHEN i % 50 = 0 THEN '{"seq":2,"failure":{"message":"declined"}}' ELSE '{"seq":2,"result":{},"attempt":1}' END, 4),
    (6, 'workflow_completed', '{"result":{}}', 5)
) e(id, type, attrs, off)
WHERE (SELECT count(*) FROM runs) > 0`

// ActivityStats reads the outcomes of its window by an index, and each
// one's schedule and run by their keys, on tables never analyzed: before
// 2026-12-03 the planner, without statistics, checked each outcome against
// the redriven runs by reading the whole events index, and took over 10
// minutes at 200,000 runs (docs/performance.md).
func TestActivityStatsWithoutTableStatistics(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := postgres.New(pool)
	t0 := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)
	const runs = 10_000
	_, err := pool.Exec(t.Context(), finishedRunsSQL, pgx.NamedArgs{"t0": t0, "n": runs})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rep, err := s.ActivityStats(ctx, store.ActivityStatsParams{Since: t0})
	require.NoError(t, err, "a plan that reads every event for each outcome takes minutes")
	require.False(t, rep.Capped)
	got := rep.Activities
	require.Len(t, got, 2)
	require.Equal(t, "ChargeCard", got[0].Activity)
	require.Equal(t, runs-runs/50, got[0].Completed)
	require.Equal(t, runs/50, got[0].Failed)
	require.InDelta(t, 800*time.Millisecond, got[0].P50, float64(time.Millisecond), "scheduled at 800 ms, completed at 1.6 s")
	require.Equal(t, "SendEmail", got[1].Activity)
	require.Equal(t, runs, got[1].Completed)

	// Capped, it counts the latest outcomes and says since when.
	rep, err = s.ActivityStats(ctx, store.ActivityStatsParams{Since: t0, Limit: 1000})
	require.NoError(t, err)
	require.True(t, rep.Capped)
	var oldest time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT created_at FROM durable_events
		WHERE type IN ('activity_completed', 'activity_failed') ORDER BY created_at DESC OFFSET 999 LIMIT 1`).Scan(&oldest))
	require.True(t, oldest.Equal(rep.Since), "since the 1000th latest outcome, %s, not %s", oldest, rep.Since)
	n := 0
	for _, a := range rep.Activities {
		n += a.Completed + a.Failed
	}
	require.Equal(t, 1000, n)
}

func TestActivityStatsNone(t *testing.T) {
	t.Parallel()
	rep, err := postgres.New(pgtest.Pool(t)).ActivityStats(t.Context(), store.ActivityStatsParams{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, store.ActivityReport{}, rep)
}
