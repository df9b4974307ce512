package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// TestClosingCommitTakesLocksInWritersOrder: a workflow-task commit that
// deletes a pending activity task (it closes the run, or cancels the
// activity) and that activity's outcome wait for each other instead of
// deadlocking. The outcome deletes its activity task and then updates the
// run; the commit, holding its workflow task, must lock the activity tasks
// before the run row, as Terminate does (a commit that updated the run
// first and then deleted the activity tasks held the run while waiting for
// the task, and PostgreSQL aborted one of the two with 40P01).
func TestClosingCommitTakesLocksInWritersOrder(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	completed := history.ActivityCompleted{Seq: 1, Result: json.RawMessage(`2`), Attempt: 1}
	closes := func(p *store.CommitWorkflowTaskParams) {
		p.Events = []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`"done"`)}}
		p.Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"done"`)}
	}
	cancels := func(p *store.CommitWorkflowTaskParams) {
		p.Events = []history.Attributes{history.ActivityCanceled{Seq: 1}}
		p.CanceledActivities = []int64{1}
	}
	tests := []struct {
		name   string
		commit func(*store.CommitWorkflowTaskParams)
		// outcomeFirst holds the outcome open after its first lock (its
		// task deleted) until the commit waits; it then appends its event
		// and commits. Otherwise both real statements meet the other way
		// round: a third transaction holds the run row while the commit,
		// and then the outcome, start, and the commit goes first.
		outcomeFirst bool
		status       string
		// events are the run's events after its signal (event 3).
		events []string
		// workflowTasks is 1 when the commit found the outcome's event and
		// made its task ready again.
		workflowTasks int
	}{
		{"ClosesOutcomeFirst", closes, true, store.StatusCompleted, []string{"activity_completed", "workflow_completed"}, 0},
		{"ClosesCommitFirst", closes, false, store.StatusCompleted, []string{"workflow_completed"}, 0},
		{"CancelsOutcomeFirst", cancels, true, store.StatusRunning, []string{"activity_completed", "activity_canceled"}, 1},
		{"CancelsCommitFirst", cancels, false, store.StatusRunning, []string{"activity_canceled"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setupPendingActivity(t, now)
			commit := store.CommitWorkflowTaskParams{RunID: b.runID, Token: b.token, ProcessedEventID: 3, Now: now}
			tt.commit(&commit)
			committed := make(chan error, 1)

			if tt.outcomeFirst {
				outcome, err := b.pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = outcome.Rollback(ctx) }()
				_, err = outcome.Exec(ctx, `DELETE FROM durable_activity_tasks WHERE id = $1`, b.act.ID)
				require.NoError(t, err)

				go func() { _, err := b.s.CommitWorkflowTask(ctx, commit); committed <- err }()
				awaitLockWaiters(t, b.pool, 1, "the commit waits for the outcome's activity task")

				attrs, err := history.Encode(completed)
				require.NoError(t, err)
				_, err = outcome.Exec(ctx, `
					WITH run AS (
					    UPDATE durable_runs SET next_event_id = next_event_id + 1, updated_at = $2
					    WHERE run_id = $1 AND status = 'running'
					    RETURNING run_id, next_event_id - 1 AS event_id
					)
					INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
					SELECT run_id, event_id, 'activity_completed', $3, $2 FROM run`, b.runID, now, string(attrs))
				require.NoError(t, err, "the outcome is not chosen as a deadlock victim")
				require.NoError(t, outcome.Commit(ctx))
				require.NoError(t, <-committed, "the commit is not chosen as a deadlock victim")
			} else {
				release := holdRun(t, b.pool, b.runID)

				go func() { _, err := b.s.CommitWorkflowTask(ctx, commit); committed <- err }()
				awaitLockWaiters(t, b.pool, 1, "the commit waits for the run")
				resolved := make(chan error, 1)
				go func() {
					_, err := b.s.ResolveActivity(ctx, store.ResolveActivityParams{
						RunID: b.runID, TaskID: b.act.ID, Attempt: b.act.Attempt, Event: completed, Now: now,
					})
					resolved <- err
				}()
				awaitLockWaiters(t, b.pool, 2, "the outcome waits too")

				require.NoError(t, release())
				require.NoError(t, <-committed, "the commit is not chosen as a deadlock victim")
				require.ErrorIs(t, <-resolved, store.ErrLeaseLost, "the commit dropped the activity first")
			}

			got, err := b.s.GetRun(ctx, b.runID)
			require.NoError(t, err)
			require.Equal(t, tt.status, got.Status)
			events, err := b.s.ListEvents(ctx, b.runID, 3)
			require.NoError(t, err)
			var types []string
			for i, e := range events {
				require.Equal(t, int64(4+i), e.ID)
				types = append(types, e.Type())
			}
			require.Equal(t, tt.events, types)
			var wts, acts int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_workflow_tasks), (SELECT count(*) FROM durable_activity_tasks)`).Scan(&wts, &acts))
			require.Equal(t, tt.workflowTasks, wts)
			require.Zero(t, acts, "the activity task is gone")
		})
	}
}

// pendingActivity is a run with a claimed activity task, and a claimed
// workflow task (made by a signal) that has processed event 3.
type pendingActivity struct {
	pool  *pgxpool.Pool
	s     *postgres.Store
	runID string
	token int64
	act   store.ActivityTask
}

func setupPendingActivity(t *testing.T, now time.Time) *pendingActivity {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	s := postgres.New(pool)
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "wf", WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: now,
	})
	require.NoError(t, err)
	claim := store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute}
	wts, err := s.ClaimWorkflowTasks(ctx, claim)
	require.NoError(t, err)
	require.Len(t, wts, 1)
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: wts[0].Token, ProcessedEventID: 1, Now: now,
		Events: []history.Attributes{history.ActivityScheduled{Seq: 1, Activity: "A", Queue: "q", Input: json.RawMessage(`1`)}},
		Activities: []store.NewActivityTask{{
			Seq: 1, Activity: "A", Queue: "q", Input: json.RawMessage(`1`), IdempotencyKey: run.RunID + ":1",
			Lease: time.Minute, RunAfter: now,
		}},
	})
	require.NoError(t, err)
	acts, err := s.ClaimActivityTasks(ctx, claim)
	require.NoError(t, err)
	require.Len(t, acts, 1)
	_, err = s.SignalRun(ctx, store.SignalParams{WorkflowID: "wf", Now: now}, history.SignalReceived{Name: "s"})
	require.NoError(t, err)
	wts, err = s.ClaimWorkflowTasks(ctx, claim)
	require.NoError(t, err)
	require.Len(t, wts, 1, "the signal made a workflow task")
	return &pendingActivity{pool: pool, s: s, runID: run.RunID, token: wts[0].Token, act: acts[0]}
}

// awaitLockWaiters waits until n statements of the test's database wait
// for a lock.
func awaitLockWaiters(t *testing.T, pool *pgxpool.Pool, n int, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == n
	}, 10*time.Second, 5*time.Millisecond, why)
}

// holdRun locks the run's row in a transaction of its own until the
// returned release commits it (or the test ends), so that a write under
// test stops at that row.
func holdRun(t *testing.T, pool *pgxpool.Pool, runID string) (release func() error) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `SELECT 1 FROM durable_runs WHERE run_id = $1 FOR NO KEY UPDATE`, runID)
	require.NoError(t, err)
	return func() error { return tx.Commit(ctx) }
}
