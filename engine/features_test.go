package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// Collect sleeps an hour, then takes n "item" signals.
func Collect(ctx workflow.Context, n int) (string, error) {
	if err := workflow.Sleep(ctx, time.Hour); err != nil {
		return "", err
	}
	items := workflow.GetSignalChannel[string](ctx, "item")
	var got []string
	for range n {
		v, err := items.Receive(ctx)
		if err != nil {
			return "", err
		}
		got = append(got, v)
	}
	return strings.Join(got, ","), nil
}

func TestSignalsSentEarlyArriveInOrder(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Collect, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, Collect, 3, engine.StartOptions{ID: "collect"})
	require.NoError(t, err)
	for _, v := range []string{"a", "b", "c"} { // before the workflow asks for them
		require.NoError(t, engine.Signal(ctx, env.Engine, "collect", "item", v))
	}
	require.NoError(t, env.Advance(ctx, time.Hour))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "a,b,c", got)

	err = engine.Signal(ctx, env.Engine, "collect", "item", "late")
	require.ErrorIs(t, err, engine.ErrRunClosed, "a signal to a closed run is an error")
	err = engine.Signal(ctx, env.Engine, "nobody", "item", "x")
	require.ErrorIs(t, err, engine.ErrRunNotFound)
}

func TestSignalWithStart(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Collect, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	// Absent: starts the run, then delivers.
	r1, err := engine.SignalWithStart(ctx, env.Engine, Collect, 2, engine.StartOptions{ID: "sws"}, "item", "first")
	require.NoError(t, err)
	require.False(t, r1.Existing)
	// Running: delivers to the same run.
	r2, err := engine.SignalWithStart(ctx, env.Engine, Collect, 2, engine.StartOptions{ID: "sws"}, "item", "second")
	require.NoError(t, err)
	require.True(t, r2.Existing)
	require.Equal(t, r1.RunID, r2.RunID)
	require.NoError(t, env.Advance(ctx, time.Hour))
	got, err := r1.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "first,second", got)
}

type cleanup struct{ ran atomic.Int32 }

func (c *cleanup) Release(context.Context, string) (bool, error) { c.ran.Add(1); return true, nil }

func (c *cleanup) Hold(ctx workflow.Context, sku string) (string, error) {
	err := workflow.Sleep(ctx, 24*time.Hour)
	if errors.Is(err, workflow.ErrCanceled) {
		// Clean up on a context the cancellation does not touch.
		dctx := workflow.NewDisconnectedContext(ctx)
		if _, err := workflow.ExecuteActivity(dctx, c.Release, sku).Get(dctx); err != nil {
			return "", err
		}
	}
	return "held", err
}

func TestCancelRunsCleanupAndEndsCanceled(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	c := &cleanup{}
	require.NoError(t, engine.RegisterWorkflow(env.Engine, c.Hold, engine.WorkflowOptions{Name: "Hold"}))
	require.NoError(t, engine.RegisterActivity(env.Engine, c.Release, activity.Options{Name: "Release"}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, c.Hold, "sku-1", engine.StartOptions{ID: "hold"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		return err == nil && countEvents(t, events, "timer_started") == 1
	}, 10*time.Second, 5*time.Millisecond)
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Len(t, info.PendingTimers, 1, "Describe shows the sleeping timer")
	require.Equal(t, env.Clock.Now().Add(24*time.Hour), info.PendingTimers[0].FireAt.UTC())
	require.NoError(t, env.Engine.Cancel(ctx, "hold", "customer left"))
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	require.Contains(t, we.Failure.Message, "canceled: customer left")
	require.Equal(t, int32(1), c.ran.Load(), "the cleanup activity ran")
	info, err = r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusCanceled, info.Status)
	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "workflow_cancel_requested"))
	require.Equal(t, 1, countEvents(t, events, "timer_canceled"))
	require.Equal(t, 1, countEvents(t, events, "workflow_canceled"))
	var timers int
	require.NoError(t, env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers").Scan(&timers))
	require.Zero(t, timers, "the canceled timer's row is gone")
	ds, err := env.Engine.DeadLetters(ctx, engine.DeadLetterFilter{})
	require.NoError(t, err)
	require.Empty(t, ds, "a canceled run is not a dead letter")
}

func TestTerminateEndsAtOnce(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	c := &cleanup{}
	require.NoError(t, engine.RegisterWorkflow(env.Engine, c.Hold, engine.WorkflowOptions{Name: "Hold"}))
	require.NoError(t, engine.RegisterActivity(env.Engine, c.Release, activity.Options{Name: "Release"}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, c.Hold, "sku-1", engine.StartOptions{ID: "term"})
	require.NoError(t, err)
	require.NoError(t, env.Engine.Terminate(ctx, "term", "stuck"))
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	require.Equal(t, "terminated: stuck", we.Failure.Message)
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusTerminated, info.Status)
	require.Zero(t, c.ran.Load(), "no workflow code ran: no cleanup")
	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Equal(t, "workflow_terminated", events[len(events)-1].Type())
	require.ErrorIs(t, env.Engine.Terminate(ctx, "term", "again"), engine.ErrRunClosed)
}

func Counter(ctx workflow.Context, n int) (int, error) {
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return 0, err
	}
	if n < 100 {
		return 0, workflow.NewContinueAsNewError(ctx, n+1)
	}
	return n, nil
}

func TestContinueAsNewKeepsHistoryShortAndIDStable(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Counter, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, Counter, 0, engine.StartOptions{ID: "counter"})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err, "Result follows the run through its continuations")
	require.Equal(t, 100, got)
	var runs, continued, longest int
	require.NoError(t, env.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status = 'continued_as_new'), max(next_event_id - 1)
		FROM durable_runs WHERE workflow_id = 'counter'`).Scan(&runs, &continued, &longest))
	require.Equal(t, 101, runs)
	require.Equal(t, 100, continued)
	require.LessOrEqual(t, longest, 4, "each run's history stays short")
}

// Greeting v1 formats, then sleeps. v2 changes the first step behind
// GetVersion; runs that passed it before the change keep the old step.
func GreetingV1(ctx workflow.Context, name string) (string, error) {
	s, err := workflow.ExecuteActivity(ctx, Format, 1).Get(ctx)
	if err != nil {
		return "", err
	}
	return s, workflow.Sleep(ctx, time.Hour)
}

func GreetingV2(ctx workflow.Context, name string) (string, error) {
	n := 1
	if workflow.GetVersion(ctx, "double-first", workflow.DefaultVersion, 1) == 1 {
		var err error
		if n, err = workflow.ExecuteActivity(ctx, Double, 1).Get(ctx); err != nil {
			return "", err
		}
	}
	s, err := workflow.ExecuteActivity(ctx, Format, n).Get(ctx)
	if err != nil {
		return "", err
	}
	return s, workflow.Sleep(ctx, time.Hour)
}

func TestGetVersionKeepsOldRunsOnTheOldBranch(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, GreetingV1, engine.WorkflowOptions{Name: "Greeting"}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Format, activity.Options{}))
	ctx := resultCtx(t)
	old, err := engine.Start(ctx, env.Engine, GreetingV1, "ada", engine.StartOptions{ID: "old"})
	require.NoError(t, err)
	// v1 runs until the run sleeps, then the deploy: a new engine with v2.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- env.Engine.Run(runCtx) }()
	require.Eventually(t, func() bool {
		events, err := old.History(ctx)
		return err == nil && countEvents(t, events, "timer_started") == 1
	}, 10*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)

	v2 := newEngine(t, env.Pool, engine.Options{NowFunc: env.Clock.Now})
	require.NoError(t, engine.RegisterWorkflow(v2, GreetingV2, engine.WorkflowOptions{Name: "Greeting"}))
	require.NoError(t, engine.RegisterActivity(v2, Format, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(v2, Double, activity.Options{}))
	run(t, v2)
	fresh, err := engine.Start(ctx, v2, GreetingV2, "grace", engine.StartOptions{ID: "new"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		events, err := fresh.History(ctx)
		return err == nil && countEvents(t, events, "timer_started") == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, env.Advance(ctx, time.Hour))

	got, err := old.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "n=1", got, "the run from before the change takes the old branch")
	got, err = fresh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "n=2", got, "a new run takes the new branch")

	// Both histories replay against v2.
	for _, id := range []string{"old", "new"} {
		h, err := v2.ExportHistory(ctx, id)
		require.NoError(t, err)
		require.NoError(t, v2.Replay(ctx, h), fmt.Sprintf("replay %s", id))
	}
	events, err := fresh.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "version_marker"))
}

// Tally counts "item" signals forever, sleeping between them, and answers
// queries about its state.
func Tally(ctx workflow.Context, _ int) (int, error) {
	count := 0
	if err := workflow.SetQueryHandler(ctx, "count", func() (int, error) { return count, nil }); err != nil {
		return 0, err
	}
	_ = workflow.SetQueryHandler(ctx, "blocks", func() (int, error) {
		_ = workflow.Sleep(ctx, time.Second)
		return 0, nil
	})
	_ = workflow.SetQueryHandler(ctx, "schedules", func() (int, error) {
		workflow.ExecuteActivity(ctx, Add, 1)
		return 0, nil
	})
	items := workflow.GetSignalChannel[string](ctx, "item")
	for {
		if _, err := items.Receive(ctx); err != nil {
			return count, err
		}
		count++
		if err := workflow.Sleep(ctx, 24*time.Hour); err != nil {
			return count, err
		}
	}
}

func TestQueryAnswersWhileTheRunSleepsAndWritesNothing(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Tally, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, Tally, 0, engine.StartOptions{ID: "tally"})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, env.Engine, "tally", "item", "a"))
	require.NoError(t, engine.Signal(ctx, env.Engine, "tally", "item", "b"))
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		return err == nil && countEvents(t, events, "timer_started") == 1
	}, 10*time.Second, 5*time.Millisecond, "the run sleeps after the first item")
	before, err := r.History(ctx)
	require.NoError(t, err)

	got, err := engine.Query[int](ctx, env.Engine, "tally", "count")
	require.NoError(t, err)
	require.Equal(t, 1, got, "the second item waits until the run wakes")
	after, err := r.History(ctx)
	require.NoError(t, err)
	require.Len(t, after, len(before), "a query writes no event")

	require.NoError(t, env.Advance(ctx, 24*time.Hour))
	require.Eventually(t, func() bool {
		n, err := engine.Query[int](ctx, env.Engine, "tally", "count")
		return err == nil && n == 2
	}, 10*time.Second, 5*time.Millisecond, "the query answers the latest state")

	_, err = engine.Query[int](ctx, env.Engine, "tally", "blocks")
	require.ErrorContains(t, err, "must not block")
	_, err = engine.Query[int](ctx, env.Engine, "tally", "schedules")
	require.ErrorContains(t, err, "handlers must only read")
	_, err = engine.Query[int](ctx, env.Engine, "tally", "nope")
	require.ErrorContains(t, err, `no handler for it (it has: blocks, count, schedules)`)
	_, err = engine.Query[int](ctx, env.Engine, "missing", "count")
	require.ErrorIs(t, err, engine.ErrRunNotFound)
}

func TestLongHistoryWarns(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	env := durabletest.New(t, durabletest.Options{Engine: engine.Options{
		HistoryWarnEvents: 10, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, ThreeNoops, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Pipeline, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Noop, activity.Options{}))
	registerActivitiesOnly(t, env.Engine)
	env.Run()
	ctx := resultCtx(t)
	short, err := engine.Start(ctx, env.Engine, Pipeline, 1, engine.StartOptions{}) // 8 events
	require.NoError(t, err)
	_, err = short.Result(ctx)
	require.NoError(t, err)
	require.NotContains(t, logs.String(), "run history is long")
	long, err := engine.Start(ctx, env.Engine, Twice, 1, engine.StartOptions{}) // 14 events
	require.NoError(t, err)
	_, err = long.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logs.String(), "run history is long"), "warned once, as it passed 10 events")
	require.Contains(t, logs.String(), "run_id="+long.RunID)
}

// Twice runs the pipeline's three activities twice.
func Twice(ctx workflow.Context, n int) (string, error) {
	if _, err := Pipeline(ctx, n); err != nil {
		return "", err
	}
	return Pipeline(ctx, n)
}

func registerActivitiesOnly(t *testing.T, e *engine.Engine) {
	t.Helper()
	require.NoError(t, engine.RegisterWorkflow(e, Twice, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Add, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Double, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Format, activity.Options{}))
}
