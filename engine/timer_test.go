package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/workflow"
)

func SleepHour(ctx workflow.Context, _ int) (time.Time, error) {
	if err := workflow.Sleep(ctx, time.Hour); err != nil {
		return time.Time{}, err
	}
	return workflow.Now(ctx), nil
}

// awaitScheduled waits until run's history holds its first
// activity_scheduled: an activity may start, running ahead, before its
// schedule commits.
func awaitScheduled[Out any](ctx context.Context, t *testing.T, r *engine.Run[Out]) {
	t.Helper()
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		require.NoError(t, err)
		return countEvents(t, events, "activity_scheduled") == 1
	}, 10*time.Second, 5*time.Millisecond, "the activity's schedule committed")
}

func countEvents(t *testing.T, events []history.Event, typ string) int {
	t.Helper()
	n := 0
	for _, e := range events {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

func Sleep58Minutes(ctx workflow.Context, _ int) (int, error) {
	return 0, workflow.Sleep(ctx, 58*time.Minute)
}

func TestTimerFiresAfterItsDurationNotBefore(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepHour, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Sleep58Minutes, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	start := env.Clock.Now()
	r, err := engine.Start(ctx, env.Engine, SleepHour, 0, engine.StartOptions{})
	require.NoError(t, err)
	probe, err := engine.Start(ctx, env.Engine, Sleep58Minutes, 0, engine.StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers").Scan(&n) == nil && n == 2
	}, 10*time.Second, 5*time.Millisecond, "both runs start their timers")

	// At 59 minutes the probe's timer is due and the hour's is not. The
	// scanner fires every due timer in one statement, so once the probe has
	// finished, a wrongly due hour timer would have fired with it.
	require.NoError(t, env.Advance(ctx, 59*time.Minute))
	_, err = probe.Result(ctx)
	require.NoError(t, err)
	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Zero(t, countEvents(t, events, "timer_fired"), "the timer must not fire before its hour")

	require.NoError(t, env.Advance(ctx, time.Minute))
	at, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, start.Add(time.Hour), at.UTC(), "workflow.Now is the recorded fire time")
}

func CancelsTimer(ctx workflow.Context, _ int) (string, error) {
	tm := workflow.NewTimer(ctx, 24*time.Hour)
	tm.Cancel()
	_, err := tm.Get(ctx)
	if !errors.Is(err, workflow.ErrCanceled) {
		return "", fmt.Errorf("want ErrCanceled, got %v", err)
	}
	if err := workflow.Sleep(ctx, 48*time.Hour); err != nil {
		return "", err
	}
	return "slept past the canceled timer", nil
}

func TestCanceledTimerNeverFires(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, CancelsTimer, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, CancelsTimer, 0, engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "slept past the canceled timer", got)
	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, countEvents(t, events, "timer_started"))
	require.Equal(t, 1, countEvents(t, events, "timer_canceled"))
	require.Equal(t, 1, countEvents(t, events, "timer_fired"), "only the second timer fires")
	fired := events[len(events)-2].Attributes.(history.TimerFired)
	require.Equal(t, int64(2), fired.Seq)
}

func Slow(ctx context.Context, d time.Duration) (string, error) {
	if d > 0 {
		return "", activity.RateLimited(errors.New("not yet"), d) // retried after d by the engine clock
	}
	return "reply", nil
}

// Deadline races the activity against a timer.
func Deadline(ctx workflow.Context, in time.Duration) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, activity.Options{Retry: activity.RetryPolicy{MaximumRateLimitedRetries: 1}})
	reply := workflow.ExecuteActivity(ctx, Slow, in)
	timeout := workflow.NewTimer(ctx, time.Minute)
	var out string
	var err error
	workflow.NewSelector(ctx).
		AddFuture(reply, func() { out, err = reply.Get(ctx); timeout.Cancel() }).
		AddFuture(timeout, func() { out = "timed out" }).
		Select(ctx)
	return out, err
}

func TestTimeoutPatternBothWays(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Deadline, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Slow, activity.Options{}))
	env.Run()
	ctx := resultCtx(t)

	fast, err := engine.Start(ctx, env.Engine, Deadline, 0, engine.StartOptions{})
	require.NoError(t, err)
	got, err := fast.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "reply", got)
	events, err := fast.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "timer_canceled"), "the losing timer is canceled")

	slow, err := engine.Start(ctx, env.Engine, Deadline, time.Hour, engine.StartOptions{})
	require.NoError(t, err)
	got, err = slow.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "timed out", got)
}

func TestTimerCreatedWhileEngineDownFiresAfterRestart(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepHour, engine.WorkflowOptions{}))
	ctx := resultCtx(t)
	// Run the engine just long enough to record the timer.
	r, err := engine.Start(ctx, env.Engine, SleepHour, 0, engine.StartOptions{})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- env.Engine.Run(runCtx) }()
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		return err == nil && countEvents(t, events, "timer_started") == 1
	}, 10*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)

	env.Clock.Advance(2 * time.Hour) // the timer came due while nothing ran
	env.Run()
	_, err = r.Result(ctx)
	require.NoError(t, err)
}

func TestTwoEnginesFireEachTimerOnce(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepHour, engine.WorkflowOptions{}))
	ctx := resultCtx(t)
	const runs = 200
	var handles []*engine.Run[time.Time]
	for i := range runs {
		r, err := engine.Start(ctx, env.Engine, SleepHour, i, engine.StartOptions{})
		require.NoError(t, err)
		handles = append(handles, r)
	}
	env.Run()
	second := newEngine(t, env.Pool, engine.Options{NowFunc: env.Clock.Now})
	require.NoError(t, engine.RegisterWorkflow(second, SleepHour, engine.WorkflowOptions{}))
	run(t, second)
	require.Eventually(t, func() bool {
		var n int
		err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers").Scan(&n)
		return err == nil && n == runs
	}, 20*time.Second, 5*time.Millisecond, "every run starts its timer")

	require.NoError(t, env.Advance(ctx, time.Hour))
	for _, r := range handles {
		_, err := r.Result(ctx)
		require.NoError(t, err)
	}
	var fired, runsWithOne int
	require.NoError(t, env.Pool.QueryRow(ctx, `
		SELECT count(*), count(DISTINCT run_id) FROM durable_events WHERE type = 'timer_fired'`).Scan(&fired, &runsWithOne))
	require.Equal(t, runs, fired, "each timer fired exactly once")
	require.Equal(t, runs, runsWithOne)
}
