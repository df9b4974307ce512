package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// cleanupRig is an activity that cleans up when canceled, and a workflow
// that, canceled, checks whether that cleanup had finished.
type cleanupRig struct {
	started chan struct{}
	cleaned atomic.Bool
}

// Work heartbeats until canceled, then takes a while to clean up.
func (c *cleanupRig) Work(ctx context.Context, _ int) (int, error) {
	close(c.started)
	for {
		if err := activity.RecordHeartbeat(ctx, nil); err != nil {
			time.Sleep(100 * time.Millisecond) // the cleanup the workflow must wait for
			c.cleaned.Store(true)
			return 0, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Cleaned reports whether Work's cleanup had finished.
func (c *cleanupRig) Cleaned(context.Context, int) (bool, error) { return c.cleaned.Load(), nil }

// Waits runs Work and, once canceled, reports from a disconnected context
// whether Work had cleaned up when its future failed.
func (c *cleanupRig) Waits(ctx workflow.Context, _ int) (bool, error) {
	_, err := workflow.ExecuteActivity(ctx, c.Work, 0).Get(ctx)
	if !errors.Is(err, workflow.ErrCanceled) {
		return false, err
	}
	dctx := workflow.NewDisconnectedContext(ctx)
	return workflow.ExecuteActivity(dctx, c.Cleaned, 0).Get(dctx)
}

func TestWaitForCancellationWaitsForTheAttempt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		wait bool
	}{
		{name: "waits", wait: true},
		{name: "does not wait"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			e := newEngine(t, pool, engine.Options{})
			c := &cleanupRig{started: make(chan struct{})}
			require.NoError(t, engine.RegisterWorkflow(e, c.Waits, engine.WorkflowOptions{Name: "Waits"}))
			require.NoError(t, engine.RegisterActivity(e, c.Work, activity.Options{Name: "Work",
				HeartbeatTimeout: 500 * time.Millisecond, WaitForCancellation: tt.wait}))
			require.NoError(t, engine.RegisterActivity(e, c.Cleaned, activity.Options{Name: "Cleaned"}))
			run(t, e)
			ctx := resultCtx(t)
			r, err := engine.Start(ctx, e, c.Waits, 0, engine.StartOptions{ID: "waits"})
			require.NoError(t, err)
			select {
			case <-c.started:
			case <-ctx.Done():
				t.Fatal("the activity did not start")
			}
			awaitScheduled(ctx, t, r)
			require.NoError(t, e.Cancel(ctx, "waits", "stop"))
			cleaned, err := r.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, tt.wait, cleaned, "the workflow went on after the cleanup only if it waits for it")
			require.NoError(t, e.ReplayRun(ctx, "waits"))
		})
	}
}

// NotPolled is on a queue no worker polls.
func NotPolled(context.Context, int) (int, error) { return 0, nil }

// CancelsUnstarted runs NotPolled with WaitForCancellation, canceled.
func CancelsUnstarted(ctx workflow.Context, _ int) (string, error) {
	_, err := workflow.ExecuteActivity(ctx, NotPolled, 0).Get(ctx)
	if errors.Is(err, workflow.ErrCanceled) {
		return "canceled", nil
	}
	return "", err
}

func TestWaitForCancellationOfAnActivityNotRunning(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{Queues: map[string]engine.QueueOptions{"default": {}}})
	require.NoError(t, engine.RegisterWorkflow(e, CancelsUnstarted, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, NotPolled, activity.Options{Queue: "nobody", WaitForCancellation: true}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, CancelsUnstarted, 0, engine.StartOptions{ID: "unstarted"})
	require.NoError(t, err)
	awaitScheduled(ctx, t, r)
	require.NoError(t, e.Cancel(ctx, "unstarted", "stop"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "canceled", got, "an activity no attempt runs is canceled at once")
	require.NoError(t, e.ReplayRun(ctx, "unstarted"))
}
