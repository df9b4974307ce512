package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testEngine is the bundle most tests need: an engine on a database of its
// own, running until the test ends.
type testEngine struct {
	pool *pgxpool.Pool
	e    *engine.Engine
}

func quietLogger() *slog.Logger {
	if os.Getenv("DURABLE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func newEngine(t *testing.T, pool *pgxpool.Pool, opts engine.Options) *engine.Engine {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = time.Second
	}
	e, err := engine.New(pool, opts)
	require.NoError(t, err)
	return e
}

// run runs e until the test ends.
func run(t *testing.T, e *engine.Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func resultCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func eventTypes(events []history.Event) []string {
	var ts []string
	for _, e := range events {
		ts = append(ts, e.Type())
	}
	return ts
}

func Add(_ context.Context, n int) (int, error)    { return n + 1, nil }
func Double(_ context.Context, n int) (int, error) { return n * 2, nil }
func Format(_ context.Context, n int) (string, error) {
	return fmt.Sprintf("n=%d", n), nil
}

func Pipeline(ctx workflow.Context, n int) (string, error) {
	a, err := workflow.ExecuteActivity(ctx, Add, n).Get(ctx)
	if err != nil {
		return "", err
	}
	b, err := workflow.ExecuteActivity(ctx, Double, a).Get(ctx)
	if err != nil {
		return "", err
	}
	return workflow.ExecuteActivity(ctx, Format, b).Get(ctx)
}

func registerPipeline(t *testing.T, e *engine.Engine) {
	t.Helper()
	require.NoError(t, engine.RegisterWorkflow(e, Pipeline, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Add, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Double, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Format, activity.Options{}))
}

func TestThreeActivityWorkflow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	registerPipeline(t, e)
	run(t, e)

	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, Pipeline, 4, engine.StartOptions{ID: "pipeline-1"})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "n=10", got)

	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{
		"workflow_started",
		"activity_scheduled", "activity_completed",
		"activity_scheduled", "activity_completed",
		"activity_scheduled", "activity_completed",
		"workflow_completed",
	}, eventTypes(events))
	for i, ev := range events {
		require.Equal(t, int64(i+1), ev.ID, "event ids are 1..n")
	}
	sched := events[3].Attributes.(history.ActivityScheduled)
	require.Equal(t, "Double", sched.Activity)
	require.JSONEq(t, "5", string(sched.Input))

	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusCompleted, info.Status)
	require.Equal(t, int64(8), info.LastEventID)
}

func TestStartIsIdempotentByID(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	registerPipeline(t, e)
	ctx := resultCtx(t)

	r1, err := engine.Start(ctx, e, Pipeline, 1, engine.StartOptions{ID: "same"})
	require.NoError(t, err)
	r2, err := engine.Start(ctx, e, Pipeline, 2, engine.StartOptions{ID: "same"})
	require.NoError(t, err)
	require.Equal(t, r1.RunID, r2.RunID, "a second start with the same ID returns the open run")
	require.False(t, r1.Existing)
	require.True(t, r2.Existing)

	_, err = engine.Start(ctx, e, Pipeline, 3, engine.StartOptions{ID: "same", RejectIfRunning: true})
	require.ErrorIs(t, err, engine.ErrAlreadyRunning)

	run(t, e)
	got, err := r2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "n=4", got, "the run keeps the first start's input")
}

func TestStartTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	registerPipeline(t, e)
	ctx := resultCtx(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := engine.StartTx(ctx, e, tx, Pipeline, 1, engine.StartOptions{ID: "tx-rolled-back"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = engine.GetRun[string](ctx, e, "tx-rolled-back")
	require.ErrorIs(t, err, engine.ErrRunNotFound, "a rolled-back StartTx leaves no run")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM durable_runs) + (SELECT count(*) FROM durable_events) + (SELECT count(*) FROM durable_workflow_tasks)").Scan(&n))
	require.Zero(t, n, "a rolled-back StartTx leaves no rows")
	_, err = rolledBack.Describe(ctx)
	require.ErrorIs(t, err, engine.ErrRunNotFound)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	committed, err := engine.StartTx(ctx, e, tx, Pipeline, 2, engine.StartOptions{ID: "tx-committed"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	run(t, e)
	got, err := committed.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "n=6", got)
}

func Reordered(ctx workflow.Context, n int) (string, error) {
	// Double and Add swapped relative to Pipeline, registered under its name.
	b, err := workflow.ExecuteActivity(ctx, Double, n).Get(ctx)
	if err != nil {
		return "", err
	}
	a, err := workflow.ExecuteActivity(ctx, Add, b).Get(ctx)
	if err != nil {
		return "", err
	}
	return workflow.ExecuteActivity(ctx, Format, a).Get(ctx)
}

func Gate(_ context.Context, _ int) (int, error) { return 0, nil }

func TestReorderedActivitiesAreNonDeterministic(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)

	// Record a history with the original code: Add, then Double. The run then
	// waits on an activity no worker has, so it stays open.
	waiting := func(ctx workflow.Context, n int) (string, error) {
		a, _ := workflow.ExecuteActivity(ctx, Add, n).Get(ctx)
		b, _ := workflow.ExecuteActivity(ctx, Double, a).Get(ctx)
		_, err := workflow.ExecuteActivity(ctx, Gate, b).Get(ctx)
		return "", err
	}
	e1 := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e1, waiting, engine.WorkflowOptions{Name: "Flow"}))
	require.NoError(t, engine.RegisterActivity(e1, Add, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e1, Double, activity.Options{}))
	r, err := engine.Start(ctx, e1, waiting, 1, engine.StartOptions{ID: "nd"})
	require.NoError(t, err)
	ctx1, stop1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- e1.Run(ctx1) }()
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		return err == nil && len(events) == 6 // started, 2x(scheduled, completed), Gate scheduled
	}, 20*time.Second, 10*time.Millisecond, "the original code schedules Add, Double and Gate")
	stop1()
	require.NoError(t, <-done1)

	// A new worker with the activities reordered replays the history when
	// Gate completes.
	e2 := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e2, Reordered, engine.WorkflowOptions{Name: "Flow"}))
	require.NoError(t, engine.RegisterActivity(e2, Gate, activity.Options{}))
	run(t, e2)
	var info engine.RunInfo
	require.Eventually(t, func() bool {
		info, err = r.Describe(ctx)
		return err == nil && info.TaskError != ""
	}, 20*time.Second, 10*time.Millisecond, "the replay fails its workflow task")
	require.Contains(t, info.TaskError, "at event 2")
	require.Contains(t, info.TaskError, "history has ActivityScheduled(Add, seq 1)")
	require.Contains(t, info.TaskError, "code did ActivityScheduled(Double, seq 1)")
	require.Contains(t, info.TaskError, "engine_test.go:")
	require.Equal(t, engine.StatusRunning, info.Status, "the run waits for fixed code instead of failing")
}

var panics atomic.Int32

func Panicky(ctx workflow.Context, n int) (int, error) {
	panics.Add(1)
	var m map[string]int
	m["boom"] = n // nil map write
	return n, nil
}

func TestPanicFailsTaskNotWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	registerPipeline(t, e)
	require.NoError(t, engine.RegisterWorkflow(e, Panicky, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)

	bad, err := engine.Start(ctx, e, Panicky, 1, engine.StartOptions{})
	require.NoError(t, err)
	var info engine.RunInfo
	require.Eventually(t, func() bool {
		info, err = bad.Describe(ctx)
		return err == nil && info.TaskError != ""
	}, 20*time.Second, 10*time.Millisecond)
	require.Contains(t, info.TaskError, "workflow panicked: assignment to entry in nil map")
	require.Contains(t, info.TaskError, "engine_test.go", "the stack trace names the workflow code")
	require.Equal(t, engine.StatusRunning, info.Status)

	good, err := engine.Start(ctx, e, Pipeline, 1, engine.StartOptions{})
	require.NoError(t, err)
	got, err := good.Result(ctx)
	require.NoError(t, err, "the same worker keeps serving other runs")
	require.Equal(t, "n=4", got)
}

func Fails(_ context.Context, _ int) (int, error) {
	return 0, activity.Permanent(errors.New("card declined"))
}

func Handles(ctx workflow.Context, n int) (string, error) {
	_, err := workflow.ExecuteActivity(ctx, Fails, n).Get(ctx)
	var ae *workflow.ActivityError
	if errors.As(err, &ae) {
		return fmt.Sprintf("handled %s after %d attempt(s): %s", ae.Class, ae.Attempts, ae.Message), nil
	}
	return "", errors.New("expected an activity error")
}

func TestActivityFailureReachesWorkflow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, Handles, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Fails, activity.Options{}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, Handles, 1, engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "handled permanent after 1 attempt(s): card declined", got)
}

func FailsWorkflow(ctx workflow.Context, n int) (int, error) {
	return 0, fmt.Errorf("no account for %d", n)
}

func TestWorkflowError(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, FailsWorkflow, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, FailsWorkflow, 7, engine.StartOptions{ID: "fails"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	require.Equal(t, "no account for 7", we.Failure.Message)
	require.Equal(t, "fails", we.WorkflowID)
}

// Remote is an activity that only another engine has.
func Remote(_ context.Context, n int) (int, error) { return n + 1, nil }

// CallsRemote runs Remote, which its own engine does not have, once
// signalled "go" (by then its engine runs for sure).
func CallsRemote(ctx workflow.Context, n int) (int, error) {
	if _, err := workflow.GetSignalChannel[int](ctx, "go").Receive(ctx); err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity(ctx, Remote, n).Get(ctx)
}

// An engine that serves an activity's queue but does not have the activity
// leaves it to the engines that do, instead of claiming it for itself and
// failing its first attempt as not registered.
func TestActivityNotRegisteredHereIsLeftToOthers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	workflows := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(workflows, CallsRemote, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(workflows, Double, activity.Options{})) // some other activity
	activities := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterActivity(activities, Remote, activity.Options{}))
	run(t, workflows)
	run(t, activities)

	r, err := engine.Start(ctx, workflows, CallsRemote, 1, engine.StartOptions{ID: "calls-remote"})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, workflows, "calls-remote", "go", 0))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got)
	events, err := r.History(ctx)
	require.NoError(t, err)
	for _, ev := range events {
		if done, ok := ev.Attributes.(history.ActivityCompleted); ok {
			require.Equal(t, 1, done.Attempt, "the first attempt ran where the activity is")
		}
	}
}
