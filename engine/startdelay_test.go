package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// TestStartAtDelaysTheFirstTask: a delayed start is recorded at once (its
// ID taken, Describe shows when it starts, a signal reaches it) but its code
// runs only once the engine's clock reaches StartAt, with the signal there
// (#37).
func TestStartAtDelaysTheFirstTask(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	var ran atomic.Int32
	delayed := func(ctx workflow.Context, _ int) (string, error) {
		ran.Add(1)
		v, ok, err := workflow.GetSignalChannel[string](ctx, "hello").ReceiveAsync()
		if err != nil {
			return "", err
		}
		if !ok {
			return "no signal at the first task", nil
		}
		return v, nil
	}
	now := func(ctx workflow.Context, _ int) (string, error) { return "now", nil }
	require.NoError(t, engine.RegisterWorkflow(env.Engine, delayed, engine.WorkflowOptions{Name: "Delayed"}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, now, engine.WorkflowOptions{Name: "Now"}))
	env.Run()
	ctx := resultCtx(t)

	startAt := env.Clock.Now().Add(time.Hour)
	r, err := engine.Start(ctx, env.Engine, delayed, 1, engine.StartOptions{ID: "later", StartAt: startAt})
	require.NoError(t, err)
	again, err := engine.Start(ctx, env.Engine, delayed, 1, engine.StartOptions{ID: "later", StartAt: startAt})
	require.NoError(t, err)
	require.True(t, again.Existing, "the delayed run holds its workflow ID (a retried Start finds it)")
	require.Equal(t, r.RunID, again.RunID)
	require.NoError(t, engine.Signal(ctx, env.Engine, "later", "hello", "hi"))

	// A run started after it, on the same queue and engine, has run: an
	// early first task (eager, handed off or claimed) would have too.
	other, err := engine.Start(ctx, env.Engine, now, 0, engine.StartOptions{})
	require.NoError(t, err)
	_, err = other.Result(ctx)
	require.NoError(t, err)
	require.Zero(t, ran.Load(), "the delayed run's code ran before StartAt")
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusRunning, info.Status)
	require.True(t, info.StartAt.Equal(startAt), "Describe shows the delayed start: %v", info.StartAt)
	require.Equal(t, int64(2), info.LastEventID, "workflow_started, signal_received")

	require.NoError(t, env.Advance(ctx, 59*time.Minute))
	info, err = r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusRunning, info.Status, "59 minutes in, the hour's delay holds")

	require.NoError(t, env.Advance(ctx, time.Minute))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hi", got, "the signal sent before StartAt is in the first task")
	require.Equal(t, int32(1), ran.Load())
	info, err = r.Describe(ctx)
	require.NoError(t, err)
	require.True(t, info.StartAt.IsZero(), "a started run shows no StartAt")
}

// TestStartAtWakesTheWorker: with a slow backstop poll (a minute), a run
// delayed by 300ms runs about 300ms later, not at the next poll.
func TestStartAtWakesTheWorker(t *testing.T) {
	t.Parallel()
	e := newEngine(t, pgtest.Pool(t), engine.Options{PollInterval: time.Minute})
	ranAt := make(chan time.Time, 1)
	stamp := func(_ context.Context, _ int) (int, error) { ranAt <- time.Now(); return 0, nil }
	wf := func(ctx workflow.Context, n int) (int, error) {
		return workflow.ExecuteActivity(ctx, stamp, n).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Stamped"}))
	require.NoError(t, engine.RegisterActivity(e, stamp, activity.Options{Name: "Stamp"}))
	run(t, e)
	ctx := resultCtx(t)
	// The pollers have polled once and sleep for the minute.
	warm, err := engine.Start(ctx, e, wf, 0, engine.StartOptions{})
	require.NoError(t, err)
	_, err = warm.Result(ctx)
	require.NoError(t, err)
	<-ranAt

	startAt := time.Now().Add(300 * time.Millisecond)
	r, err := engine.Start(ctx, e, wf, 1, engine.StartOptions{StartAt: startAt})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.NoError(t, err)
	at := <-ranAt
	require.False(t, at.Before(startAt.Add(-10*time.Millisecond)), "ran %s before StartAt", startAt.Sub(at))
	require.Less(t, at.Sub(startAt), 5*time.Second, "the worker woke at StartAt, not at the minute's poll")
	t.Logf("ran %s after StartAt", at.Sub(startAt))
}
