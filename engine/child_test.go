package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/workflow"
)

func ParentOfPipeline(ctx workflow.Context, n int) (string, error) {
	a, err := workflow.ExecuteChildWorkflow(ctx, Pipeline, n, workflow.ChildOptions{ID: "child-of-parent"}).Get(ctx)
	if err != nil {
		return "", err
	}
	_, err = workflow.ExecuteChildWorkflow(ctx, FailsWorkflow, n, workflow.ChildOptions{}).Get(ctx)
	var ce *workflow.ChildWorkflowError
	if !errors.As(err, &ce) {
		return "", errors.New("expected a child workflow error")
	}
	return a + " / " + ce.Message, nil
}

func TestChildWorkflowResultAndFailure(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{})
	registerPipeline(t, env.Engine)
	require.NoError(t, engine.RegisterWorkflow(env.Engine, FailsWorkflow, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, ParentOfPipeline, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, ParentOfPipeline, 4, engine.StartOptions{ID: "parent"})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "n=10 / no account for 4", got)
	child, err := engine.GetRun[string](ctx, env.Engine, "child-of-parent")
	require.NoError(t, err)
	v, err := child.Result(ctx)
	require.NoError(t, err, "the child is a run of its own")
	require.Equal(t, "n=10", v)
	h, err := env.Engine.ExportHistory(ctx, "parent")
	require.NoError(t, err)
	require.NoError(t, env.Engine.Replay(ctx, h), "the parent's history replays")
}

// LeavesChild starts a sleeping child with the policy in its input and
// returns at once.
func (c *cleanup) LeavesChild(ctx workflow.Context, policy string) (string, error) {
	workflow.ExecuteChildWorkflow(ctx, c.Hold, "sku-"+policy, workflow.ChildOptions{
		ID: "child-" + policy, ParentClosePolicy: workflow.ParentClosePolicy(policy),
	})
	// Let the child start before the parent closes.
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return "", err
	}
	return "done", nil
}

func TestParentClosePolicies(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	c := &cleanup{}
	require.NoError(t, engine.RegisterWorkflow(env.Engine, c.Hold, engine.WorkflowOptions{Name: "Hold"}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, c.LeavesChild, engine.WorkflowOptions{Name: "LeavesChild"}))
	require.NoError(t, engine.RegisterActivity(env.Engine, c.Release, activity.Options{Name: "Release"}))
	env.Run()
	ctx := resultCtx(t)
	for _, policy := range []string{"terminate", "cancel", "abandon"} {
		_, err := engine.Start(ctx, env.Engine, c.LeavesChild, policy, engine.StartOptions{ID: "parent-" + policy})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			info, err := env.Engine.Describe(ctx, "child-"+policy)
			return err == nil && len(info.PendingTimers) == 1
		}, 10*time.Second, 5*time.Millisecond, "the %s child sleeps", policy)
	}
	require.NoError(t, env.Advance(ctx, time.Minute)) // the parents close
	for _, policy := range []string{"terminate", "cancel", "abandon"} {
		r, err := engine.GetRun[string](ctx, env.Engine, "parent-"+policy)
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.NoError(t, err)
	}
	want := map[string]engine.Status{"terminate": engine.StatusTerminated, "cancel": engine.StatusCanceled, "abandon": engine.StatusRunning}
	for policy, status := range want {
		require.Eventually(t, func() bool {
			info, err := env.Engine.Describe(ctx, "child-"+policy)
			return err == nil && info.Status == status
		}, 10*time.Second, 5*time.Millisecond, "policy %s leaves the child %s", policy, status)
	}
	require.Equal(t, int32(1), c.ran.Load(), "only the canceled child ran its cleanup")
}

func DuplicateChild(ctx workflow.Context, _ int) (string, error) {
	_, err := workflow.ExecuteChildWorkflow(ctx, SleepHour, 0, workflow.ChildOptions{ID: "taken"}).Get(ctx)
	var ce *workflow.ChildWorkflowError
	if errors.As(err, &ce) {
		return ce.Class, nil
	}
	return "", err
}

func TestChildWithATakenIDFails(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepHour, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, DuplicateChild, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	_, err := engine.Start(ctx, env.Engine, SleepHour, 0, engine.StartOptions{ID: "taken"})
	require.NoError(t, err)
	r, err := engine.Start(ctx, env.Engine, DuplicateChild, 0, engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "already_running", got)
}

// WaitsForChild waits in the Get of a sleeping child whose policy is in its
// input.
func (c *cleanup) WaitsForChild(ctx workflow.Context, policy string) (string, error) {
	return workflow.ExecuteChildWorkflow(ctx, c.Hold, "sku-wait-"+policy, workflow.ChildOptions{
		ID: "waited-" + policy, ParentClosePolicy: workflow.ParentClosePolicy(policy),
	}).Get(ctx)
}

// TestCancelReachesAParentWaitingForItsChild checks that a parent waiting
// in a child's Future.Get learns of its cancellation (Get returns a
// canceled error), closes as canceled, and its child follows its policy.
func TestCancelReachesAParentWaitingForItsChild(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	c := &cleanup{}
	require.NoError(t, engine.RegisterWorkflow(env.Engine, c.Hold, engine.WorkflowOptions{Name: "Hold"}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, c.WaitsForChild, engine.WorkflowOptions{Name: "WaitsForChild"}))
	require.NoError(t, engine.RegisterActivity(env.Engine, c.Release, activity.Options{Name: "Release"}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, c.WaitsForChild, "cancel", engine.StartOptions{ID: "waiting-parent"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := env.Engine.Describe(ctx, "waited-cancel")
		return err == nil && len(info.PendingTimers) == 1
	}, 10*time.Second, 5*time.Millisecond, "the child sleeps")
	require.NoError(t, env.Engine.Cancel(ctx, "waiting-parent", "stop"))
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusCanceled, info.Status, "Get returned a canceled error and the parent closed canceled")
	require.Eventually(t, func() bool {
		info, err := env.Engine.Describe(ctx, "waited-cancel")
		return err == nil && info.Status == engine.StatusCanceled
	}, 10*time.Second, 5*time.Millisecond, "the child's cancel policy applied")
}

// StartsAndLeaves starts a sleeping child it abandons, waits until the
// child has started, and returns the child's run ID.
func StartsAndLeaves(ctx workflow.Context, _ int) (string, error) {
	child := workflow.ExecuteChildWorkflow(ctx, SleepHour, 0, workflow.ChildOptions{
		ID: "left-child", ParentClosePolicy: workflow.ParentCloseAbandon,
	})
	exec, err := child.GetChildWorkflowExecution().Get(ctx)
	if err != nil {
		return "", err
	}
	if _, err := workflow.SignalChildWorkflow(ctx, child, "hello", "child").Get(ctx); err != nil {
		return "", err
	}
	return exec.WorkflowID + " " + exec.RunID, nil
}

// StartsTakenChild starts a child whose workflow ID is taken.
func StartsTakenChild(ctx workflow.Context, _ int) (string, error) {
	_, err := workflow.ExecuteChildWorkflow(ctx, SleepHour, 0, workflow.ChildOptions{ID: "left-child"}).
		GetChildWorkflowExecution().Get(ctx)
	var ce *workflow.ChildWorkflowError
	if errors.As(err, &ce) {
		return ce.Class, nil
	}
	return "", fmt.Errorf("want a child workflow error, got %v", err)
}

// TestGetChildWorkflowExecution checks that a parent learns its child's run
// once the child has started, can signal it, and can return leaving it
// running; and that a child that could not start fails that future.
func TestGetChildWorkflowExecution(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, StartsAndLeaves, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, StartsTakenChild, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepHour, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, StartsAndLeaves, 0, engine.StartOptions{ID: "leaves"})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	child, err := env.Engine.Describe(ctx, "left-child")
	require.NoError(t, err)
	require.Equal(t, "left-child "+child.RunID, got)
	require.Equal(t, engine.StatusRunning, child.Status, "the abandoned child runs on")
	events, err := env.Engine.History(ctx, "left-child")
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "signal_received"), "the parent signalled it")
	require.NoError(t, env.Engine.ReplayRun(ctx, "leaves"))

	taken, err := engine.Start(ctx, env.Engine, StartsTakenChild, 0, engine.StartOptions{ID: "takes"})
	require.NoError(t, err)
	got, err = taken.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "already_running", got)
}
