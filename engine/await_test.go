package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/workflow"
)

// Approval waits up to an hour for an "approve" signal.
func Approval(ctx workflow.Context, _ int) (string, error) {
	approved := false
	workflow.Go(ctx, func(ctx workflow.Context) {
		if _, err := workflow.GetSignalChannel[bool](ctx, "approve").Receive(ctx); err == nil {
			approved = true
		}
	})
	ok, err := workflow.AwaitWithTimeout(ctx, time.Hour, func() bool { return approved })
	switch {
	case err != nil:
		return "", err
	case ok:
		return "approved", nil
	}
	return "timed out", nil
}

// WaitsForever awaits a condition that never holds.
func WaitsForever(ctx workflow.Context, _ int) (string, error) {
	if err := workflow.Await(ctx, func() bool { return false }); err != nil {
		return "", err
	}
	return "unreachable", nil
}

func TestAwaitWithTimeout(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Approval, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, WaitsForever, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)

	approved, err := engine.Start(ctx, env.Engine, Approval, 0, engine.StartOptions{ID: "approved"})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, env.Engine, "approved", "approve", true))
	got, err := approved.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "approved", got)
	events, err := approved.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "timer_canceled"), "the deadline is canceled when the condition holds")

	late, err := engine.Start(ctx, env.Engine, Approval, 0, engine.StartOptions{ID: "late"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := late.Describe(ctx)
		return err == nil && len(info.PendingTimers) == 1
	}, 10*time.Second, 5*time.Millisecond, "the deadline is set")
	require.NoError(t, env.Advance(ctx, time.Hour))
	got, err = late.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "timed out", got)

	for _, id := range []string{"approved", "late"} {
		require.NoError(t, env.Engine.ReplayRun(ctx, id))
	}

	forever, err := engine.Start(ctx, env.Engine, WaitsForever, 0, engine.StartOptions{ID: "forever"})
	require.NoError(t, err)
	require.NoError(t, env.Engine.Cancel(ctx, "forever", "enough"))
	_, err = forever.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	info, err := forever.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusCanceled, info.Status, "Await reports the cancellation")
}
