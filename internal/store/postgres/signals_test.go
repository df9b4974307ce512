package postgres_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// TestTerminateTakesLocksInWritersOrder: a terminate that meets a write in
// flight on the run waits for it instead of deadlocking with it. The write
// is held open half way, as far as its first lock: a workflow-task commit
// has locked its task row, an activity outcome has deleted its task; each
// then goes on to update the run row, which a terminate that locked the run
// first would hold (PostgreSQL then aborts one of the two, found by the
// ambiguous-commit test as a Terminate failing with 40P01).
// writersFirstLocks are the first statements of the writes that lock a
// run's rows from its tasks up: a workflow-task commit locks its task row,
// an activity outcome deletes its task. The lock-order tests hold a write
// open there ($1 is the run).
var writersFirstLocks = []struct{ name, firstLock string }{
	{"WorkflowTaskCommit", `SELECT 1 FROM durable_workflow_tasks WHERE run_id = $1 FOR UPDATE`},
	{"ActivityOutcome", `DELETE FROM durable_activity_tasks WHERE run_id = $1`},
}

func TestTerminateTakesLocksInWritersOrder(t *testing.T) {
	t.Parallel()
	for _, tt := range writersFirstLocks {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := pgtest.Pool(t)
			s := postgres.New(pool)
			now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

			// A run with a claimed workflow task and a pending activity.
			run, err := s.CreateRun(ctx, store.CreateRunParams{
				RunID: uuid.NewString(), WorkflowID: "wf", WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: now,
			})
			require.NoError(t, err)
			wts, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute})
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
			_, err = s.SignalRun(ctx, store.SignalParams{WorkflowID: "wf", Now: now}, history.SignalReceived{Name: "s"})
			require.NoError(t, err)
			wts, err = s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute})
			require.NoError(t, err)
			require.Len(t, wts, 1, "the signal made a workflow task")

			write, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = write.Rollback(ctx) }()
			_, err = write.Exec(ctx, tt.firstLock, run.RunID)
			require.NoError(t, err)

			terminated := make(chan error, 1)
			go func() {
				_, err := s.TerminateRun(ctx, store.TerminateParams{WorkflowID: "wf", Reason: "test", Now: now})
				terminated <- err
			}()
			require.Eventually(t, func() bool {
				var n int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
				return err == nil && n == 1
			}, 10*time.Second, 5*time.Millisecond, "the terminate waits for the write's lock")

			// The write goes on to the run row and commits.
			_, err = write.Exec(ctx, `UPDATE durable_runs SET updated_at = $2 WHERE run_id = $1`, run.RunID, now)
			require.NoError(t, err, "the write is not chosen as a deadlock victim")
			require.NoError(t, write.Commit(ctx))
			require.NoError(t, <-terminated, "the terminate is not chosen as a deadlock victim")

			got, err := s.GetRun(ctx, run.RunID)
			require.NoError(t, err)
			require.Equal(t, store.StatusTerminated, got.Status)
			var left int
			require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_workflow_tasks) + (SELECT count(*) FROM durable_activity_tasks)`).Scan(&left))
			require.Zero(t, left, "the terminate dropped the run's tasks")
		})
	}
}
