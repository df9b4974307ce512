package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// NeverServed is an activity that no engine of these tests runs in time.
func NeverServed(_ context.Context, n int) (int, error) { return n, nil }

// describeFailure runs NeverServed on queue with the schedule-to-start
// timeout d and describes how it failed.
func describeFailure(queue string, d time.Duration) func(workflow.Context, int) (string, error) {
	return func(ctx workflow.Context, n int) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, activity.Options{Queue: queue, ScheduleToStartTimeout: d})
		_, err := workflow.ExecuteActivity(ctx, NeverServed, n).Get(ctx)
		var ae *workflow.ActivityError
		if !errors.As(err, &ae) {
			return "", fmt.Errorf("want an *ActivityError, got %v", err)
		}
		return fmt.Sprintf("%s after %d attempt(s): %s", ae.Class, ae.Attempts, ae.Message), nil
	}
}

// An activity that no worker starts within its ScheduleToStartTimeout
// fails with a timeout, not retried, although no engine serves its queue.
func TestScheduleToStartTimeoutFailsAnActivityNoWorkerServes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	e := newEngine(t, pool, engine.Options{PollInterval: 50 * time.Millisecond,
		Queues: map[string]engine.QueueOptions{engine.DefaultQueue: {}}})
	wf := describeFailure("unserved", 200*time.Millisecond)
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "WaitsForUnserved"}))
	run(t, e)

	began := time.Now()
	r, err := engine.Start(ctx, e, wf, 1, engine.StartOptions{ID: "waits-for-unserved"})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond, "not before the timeout")
	require.Equal(t, `timeout after 0 attempt(s): schedule-to-start timeout (200ms): no worker started activity `+
		`NeverServed within it: is a worker with it registered serving queue "unserved"?`, got)
}

// A worker that claims an activity after its schedule-to-start timeout
// ended, before any engine's look failed it, fails it the same way instead
// of running it. The engines' clocks jump past the timeout once it is
// scheduled; their looks are an hour apart.
func TestScheduleToStartTimeoutFailsAnAttemptClaimedTooLate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	workflows := newEngine(t, pool, engine.Options{NowFunc: now, PollInterval: time.Hour,
		Queues: map[string]engine.QueueOptions{engine.DefaultQueue: {}}})
	wf := describeFailure("late", time.Minute)
	require.NoError(t, engine.RegisterWorkflow(workflows, wf, engine.WorkflowOptions{Name: "WaitsForLate"}))
	ran := make(chan struct{}, 1)
	late := newEngine(t, pool, engine.Options{NowFunc: now, PollInterval: time.Hour,
		Queues: map[string]engine.QueueOptions{"late": {}}})
	require.NoError(t, engine.RegisterActivity(late, func(ctx context.Context, n int) (int, error) {
		ran <- struct{}{}
		return n, nil
	}, activity.Options{Name: "NeverServed", Queue: "late"}))
	run(t, workflows)

	r, err := engine.Start(ctx, workflows, wf, 1, engine.StartOptions{ID: "waits-for-late"})
	require.NoError(t, err)
	awaitScheduled(ctx, t, r)
	skew.Store(int64(2 * time.Minute))
	run(t, late)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Contains(t, got, "timeout after 0 attempt(s): schedule-to-start timeout (1m0s): no worker started activity NeverServed")
	require.Empty(t, ran, "the late attempt did not run the activity")
}

// An activity started within its ScheduleToStartTimeout runs as usual.
func TestScheduleToStartTimeoutLetsAServedActivityRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	e := newEngine(t, pool, engine.Options{PollInterval: 50 * time.Millisecond})
	require.NoError(t, engine.RegisterActivity(e, Double, activity.Options{ScheduleToStartTimeout: 10 * time.Second}))
	wf := func(ctx workflow.Context, n int) (int, error) {
		return workflow.ExecuteActivity(ctx, Double, n).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "DoublesInTime"}))
	run(t, e)
	r, err := engine.Start(ctx, e, wf, 21, engine.StartOptions{ID: "doubles-in-time"})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 42, got)
}
