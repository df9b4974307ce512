package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// heartbeatsUntilStopped heartbeats until told to stop, and reports the
// error that stopped it.
type heartbeatsUntilStopped struct {
	started chan struct{}
	stopped chan error
}

func (h *heartbeatsUntilStopped) Run(ctx context.Context, _ int) (int, error) {
	close(h.started)
	for {
		if err := activity.RecordHeartbeat(ctx, nil); err != nil {
			h.stopped <- err
			return 0, err
		}
		select {
		case <-ctx.Done():
			h.stopped <- context.Cause(ctx)
			return 0, context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestCanceledActivityIsToldItWasCanceled checks that an activity whose
// workflow canceled it learns so at its next heartbeat, with an error it
// can test for, and that the engine does not log it as a lost lease.
func TestCanceledActivityIsToldItWasCanceled(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	log := &syncbuf.Buffer{}
	e := newEngine(t, pool, engine.Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	h := &heartbeatsUntilStopped{started: make(chan struct{}), stopped: make(chan error, 1)}
	wf := func(ctx workflow.Context, _ int) (int, error) {
		return workflow.ExecuteActivity(ctx, h.Run, 0).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "CancelsItsActivity"}))
	// A heartbeat every 20ms is checked against the store at a fifth of
	// the 500ms lease.
	require.NoError(t, engine.RegisterActivity(e, h.Run, activity.Options{Name: "HeartbeatsUntilStopped", HeartbeatTimeout: 500 * time.Millisecond}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, wf, 0, engine.StartOptions{ID: "cancels-its-activity"})
	require.NoError(t, err)
	select {
	case <-h.started:
	case <-ctx.Done():
		t.Fatal("the activity did not start")
	}
	awaitScheduled(ctx, t, r)
	require.NoError(t, e.Cancel(ctx, "cancels-its-activity", "enough"))
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	select {
	case err := <-h.stopped:
		require.ErrorIs(t, err, activity.ErrCanceled, "the activity is told it was canceled: %v", err)
	case <-ctx.Done():
		t.Fatal("the activity was not stopped")
	}
	require.NotContains(t, log.String(), "another attempt owns the task")
	require.NotContains(t, log.String(), "claimed again")
	require.False(t, errors.Is(err, context.DeadlineExceeded))
	require.True(t, strings.Contains(log.String(), "activity canceled"), "the stop is logged as a cancel:\n%s", log.String())
}
