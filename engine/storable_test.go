package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// Texts PostgreSQL cannot hold: a NUL byte and a byte that is not UTF-8.
const (
	unstorable = "nul \x00 and \xff end"
	escaped    = `nul \x00 and \xff end`
)

func FailUnstorable(workflow.Context, int) (int, error) { return 0, errors.New(unstorable) }

func PanicUnstorable(workflow.Context, int) (int, error) { panic(unstorable) }

func ReturnNUL(workflow.Context, int) (string, error) { return "a\x00b", nil }

func ActivityFailsUnstorable(context.Context, int) (int, error) { return 0, errors.New(unstorable) }

func ActivityReturnsNUL(context.Context, int) (string, error) { return "a\x00b", nil }

func CallsActivityFailsUnstorable(ctx workflow.Context, n int) (int, error) {
	return workflow.ExecuteActivity(ctx, ActivityFailsUnstorable, n).Get(ctx)
}

func CallsActivityReturnsNUL(ctx workflow.Context, n int) (string, error) {
	return workflow.ExecuteActivity(ctx, ActivityReturnsNUL, n).Get(ctx)
}

// TestUnstorableTextsAreEscapedNotWedged: an error, a panic value, a
// workflow result or an activity's error or result that PostgreSQL cannot
// hold as it is closes the run or records the failure, with the text
// escaped; the run does not stay running with its commit refused forever.
func TestUnstorableTextsAreEscapedNotWedged(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	for _, wf := range []any{FailUnstorable, PanicUnstorable} {
		require.NoError(t, engine.RegisterWorkflow(e, wf.(func(workflow.Context, int) (int, error)), engine.WorkflowOptions{}))
	}
	require.NoError(t, engine.RegisterWorkflow(e, ReturnNUL, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, CallsActivityFailsUnstorable, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, CallsActivityReturnsNUL, engine.WorkflowOptions{}))
	// Short leases: a refused write would show as a lease timeout soon.
	opts := activity.Options{StartToCloseTimeout: time.Second, Retry: activity.RetryPolicy{MaximumAttempts: 2, InitialInterval: time.Millisecond}}
	require.NoError(t, engine.RegisterActivity(e, ActivityFailsUnstorable, opts))
	require.NoError(t, engine.RegisterActivity(e, ActivityReturnsNUL, opts))
	run(t, e)

	t.Run("workflow error", func(t *testing.T) {
		t.Parallel()
		ctx := resultCtx(t)
		r, err := engine.Start(ctx, e, FailUnstorable, 0, engine.StartOptions{ID: "fail-unstorable"})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		var we *engine.WorkflowError
		require.ErrorAs(t, err, &we, "the run failed; it is not left running")
		require.Equal(t, escaped, we.Failure.Message)
		info, err := r.Describe(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.StatusFailed, info.Status)
		require.Equal(t, escaped, info.Failure.Message)
	})
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		ctx := resultCtx(t)
		r, err := engine.Start(ctx, e, PanicUnstorable, 0, engine.StartOptions{ID: "panic-unstorable"})
		require.NoError(t, err)
		var info engine.RunInfo
		require.Eventually(t, func() bool {
			info, err = r.Describe(ctx)
			return err == nil && info.TaskAttempts > 0
		}, 10*time.Second, 10*time.Millisecond, "the task failure is recorded")
		require.Contains(t, info.TaskError, escaped)
		require.Equal(t, engine.StatusRunning, info.Status, "a panic waits for new code")
	})
	t.Run("workflow result", func(t *testing.T) {
		t.Parallel()
		ctx := resultCtx(t)
		r, err := engine.Start(ctx, e, ReturnNUL, 0, engine.StartOptions{ID: "result-nul"})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		var we *engine.WorkflowError
		require.ErrorAs(t, err, &we, "the run failed; it is not left running")
		require.Contains(t, we.Failure.Message, "result of workflow ReturnNUL")
		require.Contains(t, we.Failure.Message, "NUL")
	})
	t.Run("activity error", func(t *testing.T) {
		t.Parallel()
		ctx := resultCtx(t)
		r, err := engine.Start(ctx, e, CallsActivityFailsUnstorable, 0, engine.StartOptions{ID: "activity-unstorable"})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.ErrorContains(t, err, escaped, "the activity's own error, not a lease timeout")
		events, err := r.History(ctx)
		require.NoError(t, err)
		var failed *history.ActivityFailed
		for _, ev := range events {
			if f, ok := ev.Attributes.(history.ActivityFailed); ok {
				failed = &f
			}
		}
		require.NotNil(t, failed, "events: %v", eventTypes(events))
		require.Equal(t, escaped, failed.Failure.Message)
		require.Equal(t, 2, failed.Failure.Attempts, "retried per policy")
	})
	t.Run("activity result", func(t *testing.T) {
		t.Parallel()
		ctx := resultCtx(t)
		r, err := engine.Start(ctx, e, CallsActivityReturnsNUL, 0, engine.StartOptions{ID: "activity-result-nul"})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.ErrorContains(t, err, "result of activity ActivityReturnsNUL")
		require.ErrorContains(t, err, "NUL")
	})
}

// TestCancelAndTerminateReasons: a reason with a NUL byte is recorded
// escaped, and one over the limit is a clear error that changes nothing.
func TestCancelAndTerminateReasons(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, SleepHour, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)
	canceled, err := engine.Start(ctx, e, SleepHour, 0, engine.StartOptions{ID: "cancel-me"})
	require.NoError(t, err)
	terminated, err := engine.Start(ctx, e, SleepHour, 0, engine.StartOptions{ID: "terminate-me"})
	require.NoError(t, err)

	long := strings.Repeat("r", 1001)
	require.ErrorContains(t, e.Cancel(ctx, "cancel-me", long), "reason is 1001 bytes, the limit is 1000")
	require.ErrorContains(t, e.Terminate(ctx, "terminate-me", long), "reason is 1001 bytes, the limit is 1000")

	require.NoError(t, e.Cancel(ctx, "cancel-me", unstorable))
	require.NoError(t, e.Terminate(ctx, "terminate-me", unstorable))
	_, err = canceled.Result(ctx)
	require.ErrorContains(t, err, escaped)
	_, err = terminated.Result(ctx)
	require.ErrorContains(t, err, escaped)
	info, err := e.Describe(ctx, "terminate-me")
	require.NoError(t, err)
	require.Equal(t, engine.StatusTerminated, info.Status)
	require.Equal(t, "terminated: "+escaped, info.Failure.Message)
	events, err := canceled.History(ctx)
	require.NoError(t, err)
	var reasons []string
	for _, ev := range events {
		if c, ok := ev.Attributes.(history.WorkflowCancelRequested); ok {
			reasons = append(reasons, c.Reason)
		}
	}
	require.Equal(t, []string{escaped}, reasons, "one request, the oversized one was not recorded")
}
