package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// awaitsApproval asks for an approval elsewhere and returns
// activity.ErrResultPending: its result comes later, by its task token.
type awaitsApproval struct {
	attempts chan activity.Info
}

func (a *awaitsApproval) Run(ctx context.Context, _ int) (string, error) {
	a.attempts <- activity.GetInfo(ctx)
	return "", activity.ErrResultPending
}

// asyncSetup runs a workflow that waits for awaitsApproval on a worker
// engine, and returns the started run, the activity and an engine that
// runs no workers, to complete it from, on the pool of their database.
func asyncSetup(t *testing.T, id string, opts activity.Options) (*engine.Run[string], *awaitsApproval, *engine.Engine, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	a := &awaitsApproval{attempts: make(chan activity.Info, 10)}
	wf := func(ctx workflow.Context, n int) (string, error) {
		return workflow.ExecuteActivity(ctx, a.Run, n).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "AwaitsApproval"}))
	opts.Name = "RequestApproval"
	require.NoError(t, engine.RegisterActivity(e, a.Run, opts))
	run(t, e)
	r, err := engine.Start(resultCtx(t), e, wf, 1, engine.StartOptions{ID: id})
	require.NoError(t, err)
	return r, a, newEngine(t, pool, engine.Options{}), pool
}

// attempt waits for the activity's next attempt.
func (a *awaitsApproval) attempt(t *testing.T, ctx context.Context) activity.Info {
	t.Helper()
	select {
	case info := <-a.attempts:
		require.NotEmpty(t, info.TaskToken, "an activity of a run gets a task token")
		return info
	case <-ctx.Done():
		t.Fatal("the activity did not start")
		return activity.Info{}
	}
}

func TestCompleteActivityByTokenFromAnotherEngine(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	r, a, other, _ := asyncSetup(t, "expense-token", activity.Options{})
	info := a.attempt(t, ctx)
	require.NoError(t, engine.RecordActivityHeartbeat(ctx, other, info.TaskToken, "waiting for a manager"))
	require.NoError(t, engine.CompleteActivity(ctx, other, info.TaskToken, "approved"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "approved", got)

	err = engine.CompleteActivity(ctx, other, info.TaskToken, "approved twice")
	require.ErrorIs(t, err, engine.ErrActivityNotFound, "a second completion is refused")
	require.ErrorIs(t, engine.FailActivity(ctx, other, info.TaskToken, errors.New("late")), engine.ErrActivityNotFound)
	require.ErrorIs(t, engine.RecordActivityHeartbeat(ctx, other, info.TaskToken, nil), engine.ErrActivityNotFound)
	require.ErrorContains(t, engine.CompleteActivity(ctx, other, []byte("not-a-token"), "x"), "invalid task token")
}

func TestCompleteActivityByID(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	r, a, other, pool := asyncSetup(t, "expense-id", activity.Options{})
	info := a.attempt(t, ctx)
	require.Eventually(t, func() bool {
		var holder string
		err := pool.QueryRow(ctx, "SELECT coalesce(locked_by, '') FROM durable_activity_tasks").Scan(&holder)
		return err == nil && holder == "async"
	}, 10*time.Second, 5*time.Millisecond, "the worker hands the pending attempt's claim off, so that it does not give it back on shutdown")
	require.ErrorIs(t, engine.CompleteActivityByID(ctx, other, "no-such-workflow", info.Seq, "x"), engine.ErrRunNotFound)
	require.ErrorIs(t, engine.CompleteActivityByID(ctx, other, "expense-id", info.Seq+100, "x"), engine.ErrActivityNotFound)
	require.NoError(t, engine.CompleteActivityByID(ctx, other, "expense-id", info.Seq, "approved by id"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "approved by id", got)
	require.ErrorIs(t, engine.CompleteActivityByID(ctx, other, "expense-id", info.Seq, "again"), engine.ErrRunClosed)
}

func TestCompleteActivityTx(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	r, a, other, pool := asyncSetup(t, "expense-tx", activity.Options{})
	info := a.attempt(t, ctx)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // if the test fails first
	require.NoError(t, engine.CompleteActivityTx(ctx, other, tx, info.TaskToken, "rolled back"))
	require.NoError(t, tx.Rollback(ctx))

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	require.NoError(t, engine.CompleteActivityTx(ctx, other, tx, info.TaskToken, "committed"),
		"a rolled-back completion completed nothing")
	require.NoError(t, tx.Commit(ctx))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "committed", got)
	require.ErrorIs(t, engine.CompleteActivity(ctx, other, info.TaskToken, "again"), engine.ErrActivityNotFound)
}

// TestFailActivityRetriesAndFencesTheOldToken checks that an attempt failed
// from elsewhere is retried per the activity's policy, and that the failed
// attempt's token completes nothing afterwards, not even while the retry
// waits for its turn.
func TestFailActivityRetriesAndFencesTheOldToken(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	r, a, other, _ := asyncSetup(t, "expense-fail", activity.Options{
		Retry: activity.RetryPolicy{MaximumAttempts: 2, InitialInterval: 200 * time.Millisecond},
	})
	first := a.attempt(t, ctx)
	require.NoError(t, engine.FailActivity(ctx, other, first.TaskToken, errors.New("manager unreachable")))
	require.ErrorIs(t, engine.CompleteActivity(ctx, other, first.TaskToken, "stale"), engine.ErrActivityNotFound,
		"the failed attempt's token is refused while its retry waits")
	second := a.attempt(t, ctx)
	require.Equal(t, 2, second.Attempt)
	require.ErrorIs(t, engine.CompleteActivity(ctx, other, first.TaskToken, "stale"), engine.ErrActivityNotFound)
	require.NoError(t, engine.FailActivity(ctx, other, second.TaskToken, errors.New("declined")))
	_, err := r.Result(ctx)
	require.ErrorContains(t, err, "declined", "the last attempt's failure reaches the workflow")
}

// TestAsyncActivityTimesOut checks that an attempt whose result is pending
// still has its start-to-close timeout: when it passes, the activity is
// retried, and the timed-out attempt's token is refused.
func TestAsyncActivityTimesOut(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	r, a, other, _ := asyncSetup(t, "expense-timeout", activity.Options{
		StartToCloseTimeout: time.Second,
		Retry:               activity.RetryPolicy{MaximumAttempts: 2, InitialInterval: 10 * time.Millisecond},
	})
	first := a.attempt(t, ctx)
	second := a.attempt(t, ctx) // after the first's lease ran out
	require.Equal(t, 2, second.Attempt)
	require.ErrorIs(t, engine.CompleteActivity(ctx, other, first.TaskToken, "too late"), engine.ErrActivityNotFound,
		"a timed-out attempt's token is refused")
	// The last attempt times out too: the activity fails for good.
	_, err := r.Result(ctx)
	require.ErrorContains(t, err, "timeout")
	require.ErrorIs(t, engine.CompleteActivity(ctx, other, second.TaskToken, "too late"), engine.ErrActivityNotFound)
}

// TestPendingActivitySurvivesWorkerShutdown checks that a worker that shuts
// down does not give back an attempt that waits for its result (which
// would run the activity again and void its token), and that another
// worker runs the workflow on once the attempt is completed.
func TestPendingActivitySurvivesWorkerShutdown(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	pool := pgtest.Pool(t)
	a := &awaitsApproval{attempts: make(chan activity.Info, 10)}
	wf := func(ctx workflow.Context, n int) (string, error) {
		return workflow.ExecuteActivity(ctx, a.Run, n).Get(ctx)
	}
	worker := func() *engine.Engine {
		e := newEngine(t, pool, engine.Options{})
		require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "AwaitsApproval"}))
		require.NoError(t, engine.RegisterActivity(e, a.Run, activity.Options{Name: "RequestApproval"}))
		return e
	}
	first := worker()
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
			<-done
		}
	})
	r, err := engine.Start(ctx, first, wf, 1, engine.StartOptions{ID: "expense-shutdown"})
	require.NoError(t, err)
	info := a.attempt(t, ctx)
	holder := func() (h string, attempt int, err error) {
		err = pool.QueryRow(ctx, "SELECT coalesce(locked_by, ''), attempt FROM durable_activity_tasks").Scan(&h, &attempt)
		return h, attempt, err
	}
	require.Eventually(t, func() bool { h, _, err := holder(); return err == nil && h == "async" }, 10*time.Second, 5*time.Millisecond,
		"the worker hands the pending attempt's claim off")
	stop()
	stopped = true
	require.NoError(t, <-done)
	h, attempt, err := holder()
	require.NoError(t, err)
	require.Equal(t, "async", h, "shutdown gave the pending attempt back")
	require.Equal(t, 1, attempt)

	run(t, worker())
	require.NoError(t, engine.CompleteActivity(ctx, newEngine(t, pool, engine.Options{}), info.TaskToken, "approved after a restart"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "approved after a restart", got)
	require.Empty(t, a.attempts, "the activity ran once")
}

// TestJobCannotWaitForItsResult checks that a standalone job, which has no
// workflow to deliver a later result to, fails for good when it returns
// activity.ErrResultPending, saying why, instead of being retried.
func TestJobCannotWaitForItsResult(t *testing.T) {
	t.Parallel()
	e := newEngine(t, pgtest.Pool(t), engine.Options{})
	job := &jobCounter{err: activity.ErrResultPending}
	require.NoError(t, engine.RegisterActivity(e, job.Run, activity.Options{Name: "Ship", Retry: fastRetry(10)}))
	run(t, e)
	_, err := engine.Enqueue(resultCtx(t), e, job.Run, 1, engine.JobOptions{Key: "ship-1"})
	require.NoError(t, err)
	d := waitDeadLetter(t, e, engine.DeadJob)
	require.Equal(t, int32(1), job.attempts.Load(), "not retried")
	require.Contains(t, d.LastError, "only activities of a workflow can complete later")
}
