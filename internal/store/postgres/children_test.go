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

// TestClosingParentTakesChildLocksInWritersOrder: a parent that closes and
// terminates its child waits for a write in flight on the child instead of
// deadlocking with it. The write is held open half way, as far as its first
// lock: the child's workflow-task commit has locked its task row, the
// child's activity outcome has deleted its task; each then goes on to
// update the child's run row, which a closing parent that locked the child
// runs first (as closeChildren did) would hold, and PostgreSQL aborted one
// of the two with 40P01.
func TestClosingParentTakesChildLocksInWritersOrder(t *testing.T) {
	t.Parallel()
	for _, tt := range writersFirstLocks {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := setupFamily(t)

			write, err := f.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = write.Rollback(ctx) }()
			_, err = write.Exec(ctx, tt.firstLock, f.child)
			require.NoError(t, err)

			closed := make(chan error, 1)
			go func() { _, err := f.s.CommitWorkflowTask(ctx, f.parentCloses()); closed <- err }()
			awaitLockWaiters(t, f.pool, 1, "the closing parent waits for the write's lock")

			// The write goes on to the child's run row and commits.
			_, err = write.Exec(ctx, `UPDATE durable_runs SET updated_at = $2 WHERE run_id = $1`, f.child, f.now)
			require.NoError(t, err, "the write is not chosen as a deadlock victim")
			require.NoError(t, write.Commit(ctx))
			require.NoError(t, <-closed, "the closing parent is not chosen as a deadlock victim")

			f.requireStatus(t, f.parent, store.StatusCompleted)
			f.requireStatus(t, f.child, store.StatusTerminated)
			f.requireNoTasks(t, f.child)
		})
	}
}

// TestParentAndChildCloseTogether: a child and its parent that close at the
// same time wait for each other instead of deadlocking. The child's close
// (its commit, or Terminate) reports to the parent (it updates the parent's
// run row); the parent's close terminates the child (it locks the child's
// rows). The child's close therefore locks the parent's run before its own
// rows, as the parent's close does. Locking the parent's run only to
// report, after its own rows, the child held its rows while it waited for
// the parent's run, the parent held its run while it waited for the
// child's rows, and PostgreSQL aborted one of the two with 40P01.
func TestParentAndChildCloseTogether(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		childClose func(context.Context, *family) error
		status     string
		// report is the event the child's close appends to the parent.
		report string
	}{
		{"ChildCommit", func(ctx context.Context, f *family) error {
			_, err := f.s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
				RunID: f.child, Token: f.childToken, ProcessedEventID: 3, ParentRunID: f.parent, Now: f.now,
				Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`"child"`)}},
				Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"child"`)},
			})
			return err
		}, store.StatusCompleted, "child_workflow_completed"},
		{"ChildTerminate", func(ctx context.Context, f *family) error {
			_, err := f.s.TerminateRun(ctx, store.TerminateParams{WorkflowID: "child", Reason: "test", Now: f.now})
			return err
		}, store.StatusTerminated, "child_workflow_failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := setupFamily(t)

			// The child's run row is held elsewhere, so the child's close
			// stops there, its tasks locked, while the parent's close starts.
			release := holdRun(t, f.pool, f.child)

			childClosed := make(chan error, 1)
			go func() { childClosed <- tt.childClose(ctx, f) }()
			awaitLockWaiters(t, f.pool, 1, "the child's close waits for its run")
			parentClosed := make(chan error, 1)
			go func() { _, err := f.s.CommitWorkflowTask(ctx, f.parentCloses()); parentClosed <- err }()
			awaitLockWaiters(t, f.pool, 2, "the parent's close waits too")

			require.NoError(t, release())
			require.NoError(t, <-childClosed, "the child's close is not chosen as a deadlock victim")
			require.NoError(t, <-parentClosed, "the parent's close is not chosen as a deadlock victim")

			// The child went first: it reported to the parent, which then
			// closed after that report and found no open child.
			f.requireStatus(t, f.child, tt.status)
			f.requireStatus(t, f.parent, store.StatusCompleted)
			require.Equal(t, []string{tt.report, "workflow_completed"}, f.eventsAfter(t, f.parent, 4))
			f.requireNoTasks(t, f.child)
		})
	}
}

// TestClosingParentTerminatesContinuation: a child that continues as new
// while its parent closes does not escape the parent-close policy. The
// parent finds the child open, waits for the child's commit, finds it
// closed, and looks again: the continuation, a new run with the same
// parent, is terminated. (Locking the children it had listed, the parent
// skipped the one that closed meanwhile and never saw its continuation,
// left running.)
func TestClosingParentTerminatesContinuation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := setupFamily(t)

	release := holdRun(t, f.pool, f.child)

	next := uuid.NewString()
	continued := make(chan error, 1)
	go func() {
		_, err := f.s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
			RunID: f.child, Token: f.childToken, ProcessedEventID: 3, ParentRunID: f.parent, Now: f.now,
			Events:     []history.Attributes{history.WorkflowContinuedAsNew{Input: json.RawMessage(`2`), NewRunID: next}},
			Close:      &store.CloseRun{Status: store.StatusContinuedAsNew},
			ContinueAs: &store.NewRun{RunID: next, Input: json.RawMessage(`2`)},
		})
		continued <- err
	}()
	awaitLockWaiters(t, f.pool, 1, "the child's continue-as-new waits for its run")
	parentClosed := make(chan error, 1)
	go func() { _, err := f.s.CommitWorkflowTask(ctx, f.parentCloses()); parentClosed <- err }()
	awaitLockWaiters(t, f.pool, 2, "the parent's close waits for the child")

	require.NoError(t, release())
	require.NoError(t, <-continued)
	require.NoError(t, <-parentClosed)

	f.requireStatus(t, f.parent, store.StatusCompleted)
	f.requireStatus(t, f.child, store.StatusContinuedAsNew)
	f.requireStatus(t, next, store.StatusTerminated)
	f.requireNoTasks(t, next)
}

// family is a parent run with one child (parent-close policy terminate).
// Each has a claimed workflow task, made by a signal, that has processed
// event 3; the child also has a claimed activity task.
type family struct {
	pool          *pgxpool.Pool
	s             *postgres.Store
	now           time.Time
	parent, child string
	parentToken   int64
	childToken    int64
}

func setupFamily(t *testing.T) *family {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	f := &family{pool: pool, s: postgres.New(pool), now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), child: uuid.NewString()}
	claim := func(queue string) store.WorkflowTask {
		t.Helper()
		wts, err := f.s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: queue, WorkerID: "w", Limit: 1, Now: f.now, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, wts, 1, "a workflow task on queue %s", queue)
		return wts[0]
	}
	signal := func(workflowID string) {
		t.Helper()
		_, err := f.s.SignalRun(ctx, store.SignalParams{WorkflowID: workflowID, Now: f.now}, history.SignalReceived{Name: "s"})
		require.NoError(t, err)
	}

	parent, err := f.s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "parent", WorkflowType: "P", Queue: "pq", Input: json.RawMessage(`1`), Now: f.now,
	})
	require.NoError(t, err)
	f.parent = parent.RunID
	wt := claim("pq")
	start := history.ChildWorkflowScheduled{
		Seq: 1, WorkflowType: "C", WorkflowID: "child", RunID: f.child, Queue: "cq", Input: json.RawMessage(`1`),
		ParentClosePolicy: "terminate",
	}
	_, err = f.s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: f.parent, Token: wt.Token, ProcessedEventID: 1, Now: f.now,
		Events: []history.Attributes{start},
		Children: []store.NewChild{{
			Seq: 1, RunID: f.child, WorkflowID: "child", WorkflowType: "C", Queue: "cq", Input: json.RawMessage(`1`),
			ParentClosePolicy: "terminate",
		}},
	})
	require.NoError(t, err)

	wt = claim("cq")
	require.Equal(t, f.parent, wt.ParentRunID)
	_, err = f.s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: f.child, Token: wt.Token, ProcessedEventID: 1, Now: f.now,
		Events: []history.Attributes{history.ActivityScheduled{Seq: 1, Activity: "A", Queue: "aq", Input: json.RawMessage(`1`)}},
		Activities: []store.NewActivityTask{{
			Seq: 1, Activity: "A", Queue: "aq", Input: json.RawMessage(`1`), IdempotencyKey: f.child + ":1",
			Lease: time.Minute, RunAfter: f.now,
		}},
	})
	require.NoError(t, err)
	acts, err := f.s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "aq", WorkerID: "w", Limit: 1, Now: f.now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, acts, 1)

	signal("child")
	f.childToken = claim("cq").Token
	signal("parent")
	f.parentToken = claim("pq").Token
	return f
}

// parentCloses is the parent's closing commit.
func (f *family) parentCloses() store.CommitWorkflowTaskParams {
	return store.CommitWorkflowTaskParams{
		RunID: f.parent, Token: f.parentToken, ProcessedEventID: 4, CloseChildren: true, Now: f.now,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`"parent"`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"parent"`)},
	}
}

func (f *family) requireStatus(t *testing.T, runID, status string) {
	t.Helper()
	got, err := f.s.GetRun(t.Context(), runID)
	require.NoError(t, err)
	require.Equal(t, status, got.Status, "status of run %s", runID)
}

// requireNoTasks checks that a closed run left no workflow or activity task.
func (f *family) requireNoTasks(t *testing.T, runID string) {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM durable_workflow_tasks WHERE run_id = $1)
		+ (SELECT count(*) FROM durable_activity_tasks WHERE run_id = $1)`, runID).Scan(&n))
	require.Zero(t, n, "run %s has no tasks left", runID)
}

// eventsAfter returns the types of a run's events after event after,
// checking their IDs go on from it.
func (f *family) eventsAfter(t *testing.T, runID string, after int64) []string {
	t.Helper()
	events, err := f.s.ListEvents(t.Context(), runID, after)
	require.NoError(t, err)
	var types []string
	for i, e := range events {
		require.Equal(t, after+1+int64(i), e.ID)
		types = append(types, e.Type())
	}
	return types
}
