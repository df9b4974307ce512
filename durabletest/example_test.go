package durabletest_test

// These tests show how to test workflows with durabletest. An Env needs a
// *testing.T (it makes a database of its own and drops it when the test
// passes), so they are tests rather than Examples.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/workflow"
)

// CheckIn is an activity.
func CheckIn(_ context.Context, name string) (string, error) { return "checked in " + name, nil }

// WeekLater sleeps a week, durably, then checks in.
func WeekLater(ctx workflow.Context, name string) (string, error) {
	if err := workflow.Sleep(ctx, 7*24*time.Hour); err != nil {
		return "", err
	}
	return workflow.ExecuteActivity(ctx, CheckIn, name).Get(ctx)
}

// TestExampleSleepAWeek runs a workflow that sleeps for a week. The Env's
// clock skips to the timer as soon as nothing else is running or ready, so
// the test takes milliseconds.
func TestExampleSleepAWeek(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, WeekLater, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, CheckIn, activity.Options{}))
	env.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	start := env.Clock.Now()
	run, err := engine.Start(ctx, env.Engine, WeekLater, "ada", engine.StartOptions{ID: "week-later:ada"})
	require.NoError(t, err)
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "checked in ada", got)
	require.GreaterOrEqual(t, env.Clock.Now().Sub(start), 7*24*time.Hour, "a week passed on the engine's clock")
}

// Deadline returns the time at which its timer fired, by the workflow's
// clock.
func Deadline(ctx workflow.Context, d time.Duration) (time.Time, error) {
	if err := workflow.Sleep(ctx, d); err != nil {
		return time.Time{}, err
	}
	return workflow.Now(ctx), nil
}

// TestExampleManualClock moves the clock by hand with Env.Advance: the run
// finishes once its timer's hour has passed on the engine's clock.
func TestExampleManualClock(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Deadline, engine.WorkflowOptions{}))
	env.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	start := env.Clock.Now()
	run, err := engine.Start(ctx, env.Engine, Deadline, time.Hour, engine.StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := run.Describe(ctx)
		return err == nil && info.LastEventID == 2 // workflow_started, timer_started
	}, 10*time.Second, 5*time.Millisecond, "the workflow starts its timer")

	require.NoError(t, env.Advance(ctx, 59*time.Minute))
	info, err := run.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusRunning, info.Status, "59 minutes in, the hour's timer waits")

	require.NoError(t, env.Advance(ctx, time.Minute))
	firedAt, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, start.Add(time.Hour), firedAt.UTC())
}

// flaky fails its first two attempts.
func flaky(ctx context.Context, _ string) (int, error) {
	if a := activity.GetInfo(ctx).Attempt; a < 3 {
		return 0, errors.New("try again")
	}
	return activity.GetInfo(ctx).Attempt, nil
}

// Retrying runs flaky and reports the attempt that succeeded.
func Retrying(ctx workflow.Context, _ string) (int, error) {
	return workflow.ExecuteActivity(ctx, flaky, "").Get(ctx)
}

// TestExampleRetriesSkipTime shows that retry delays are measured on the
// engine's clock too: the Env skips them as it skips timers.
func TestExampleRetriesSkipTime(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Retrying, engine.WorkflowOptions{}))
	// An anonymous or unexported function works too, under the name given.
	require.NoError(t, engine.RegisterActivity(env.Engine, flaky, activity.Options{
		Name:  "Flaky",
		Retry: activity.RetryPolicy{InitialInterval: time.Hour, BackoffCoefficient: 1, MaximumAttempts: 3},
	}))
	env.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	run, err := engine.Start(ctx, env.Engine, Retrying, "", engine.StartOptions{})
	require.NoError(t, err)
	attempt, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, attempt)

	events, err := run.History(ctx)
	require.NoError(t, err)
	scheduled, ok := events[1].Attributes.(history.ActivityScheduled)
	require.True(t, ok, "event 2 is %s", events[1].Type())
	require.Equal(t, "Flaky", scheduled.Activity, "history records the registered name")
}

// RetryingElsewhere runs flaky on the "payments" queue.
func RetryingElsewhere(ctx workflow.Context, _ string) (int, error) {
	return workflow.ExecuteActivity(ctx, flaky, "").Get(ctx)
}

// TestSkippedTimeWakesQueuesNamedAtRegistration checks that the Env wakes
// the queues the engine serves because its registrations name them, not
// only those of Options.Engine.Queues: with a one-minute poll, a retry
// on such a queue would otherwise wait for the poll.
func TestSkippedTimeWakesQueuesNamedAtRegistration(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Engine: engine.Options{PollInterval: time.Minute}})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, RetryingElsewhere, engine.WorkflowOptions{Queue: "orders"}))
	require.NoError(t, engine.RegisterActivity(env.Engine, flaky, activity.Options{Queue: "payments"}))
	env.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := engine.Start(ctx, env.Engine, RetryingElsewhere, "", engine.StartOptions{})
	require.NoError(t, err)
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, got)
}
