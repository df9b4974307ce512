package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// AwaitsApproval adds one, then waits a day for an "approve" signal naming
// the approver; "nobody" rejects.
func AwaitsApproval(ctx workflow.Context, n int) (string, error) {
	a, err := workflow.ExecuteActivity(ctx, Add, n).Get(ctx)
	if err != nil {
		return "", err
	}
	deadline := workflow.NewTimer(ctx, 24*time.Hour)
	approvals := workflow.GetSignalChannel[string](ctx, "approve")
	var who string
	workflow.NewSelector(ctx).
		AddReceive(approvals, func() { who, _, err = approvals.ReceiveAsync() }).
		AddFuture(deadline, func() {
			if _, err = deadline.Get(ctx); err == nil {
				err = errors.New("no approval within a day")
			}
		}).
		Select(ctx)
	if err != nil {
		return "", err // canceled: the run ends as canceled
	}
	deadline.Cancel()
	if who == "nobody" {
		return "", errors.New("rejected")
	}
	return fmt.Sprintf("%d approved by %s", a, who), nil
}

// TestClosedRunsReplay replays the history of a run closed each way a run
// closes, including from outside (Terminate, Cancel), against the code
// that wrote it.
func TestClosedRunsReplay(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, AwaitsApproval, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Add, activity.Options{}))
	run(t, e)

	// waiting starts a run and returns once it waits for the approval: its
	// timer is in history.
	waiting := func(t *testing.T, ctx context.Context, id string) *engine.Run[string] {
		t.Helper()
		r, err := engine.Start(ctx, e, AwaitsApproval, 1, engine.StartOptions{ID: id})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			events, err := r.History(ctx)
			return err == nil && countEvents(t, events, "timer_started") == 1
		}, 20*time.Second, 5*time.Millisecond, "the run waits for its approval")
		return r
	}
	tests := []struct {
		name  string
		close func(t *testing.T, ctx context.Context, id string)
		last  string
	}{
		{"completed", func(t *testing.T, ctx context.Context, id string) {
			r := waiting(t, ctx, id)
			require.NoError(t, engine.Signal(ctx, e, id, "approve", "ada"))
			got, err := r.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "2 approved by ada", got)
		}, "workflow_completed"},
		{"failed", func(t *testing.T, ctx context.Context, id string) {
			r := waiting(t, ctx, id)
			require.NoError(t, engine.Signal(ctx, e, id, "approve", "nobody"))
			_, err := r.Result(ctx)
			require.ErrorContains(t, err, "rejected")
		}, "workflow_failed"},
		{"canceled", func(t *testing.T, ctx context.Context, id string) {
			r := waiting(t, ctx, id)
			require.NoError(t, e.Cancel(ctx, id, "withdrawn"))
			_, err := r.Result(ctx)
			require.ErrorContains(t, err, "canceled: withdrawn")
		}, "workflow_canceled"},
		{"terminated while waiting", func(t *testing.T, ctx context.Context, id string) {
			r := waiting(t, ctx, id)
			require.NoError(t, e.Terminate(ctx, id, "stuck"))
			_, err := r.Result(ctx)
			require.ErrorContains(t, err, "terminated: stuck")
		}, "workflow_terminated"},
		{"terminated before its first task", func(t *testing.T, ctx context.Context, id string) {
			// No worker serves the queue: the code never ran, and on
			// replay it asks for an activity history never recorded.
			r, err := engine.Start(ctx, e, AwaitsApproval, 1, engine.StartOptions{ID: id, Queue: "unserved"})
			require.NoError(t, err)
			require.NoError(t, engine.Signal(ctx, e, id, "approve", "ada"))
			require.NoError(t, e.Terminate(ctx, id, "never ran"))
			_, err = r.Result(ctx)
			require.ErrorContains(t, err, "terminated: never ran")
		}, "workflow_terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Each subtest has its own deadline: parallel subtests start
			// only after the parent returns, once others make room.
			ctx := resultCtx(t)
			id := "approval-" + tt.name
			tt.close(t, ctx, id)
			h, err := e.ExportHistory(ctx, id)
			require.NoError(t, err)
			last := h.Events[len(h.Events)-1]
			require.Equal(t, tt.last, last.Type())

			rp, err := engine.NewReplayer(engine.ReplayerOptions{Logger: quietLogger()})
			require.NoError(t, err)
			require.NoError(t, engine.RegisterWorkflow(rp, AwaitsApproval, engine.WorkflowOptions{}))
			require.NoError(t, engine.RegisterActivity(rp, Add, activity.Options{}))
			require.NoError(t, rp.Replay(ctx, h), "a closed run's history replays")

			var steps []engine.TraceStep
			pending, err := rp.ReplayTrace(ctx, h, 0, func(s engine.TraceStep) { steps = append(steps, s) })
			require.NoError(t, err, "a closed run's history traces")
			require.NotEmpty(t, steps)
			require.Equal(t, last.ID, steps[len(steps)-1].EventID, "the trace reaches the close event")
			if _, ok := last.Attributes.(history.WorkflowTerminated); ok {
				require.Equal(t, engine.TraceStep{EventID: last.ID, Kind: engine.TraceEvent, Text: "WorkflowTerminated: " + last.Attributes.(history.WorkflowTerminated).Reason},
					steps[len(steps)-1])
				require.Empty(t, pending, "a terminated run waits for nothing")
			}
			// The database's replay of the same run agrees.
			require.NoError(t, e.ReplayRun(ctx, id))
		})
	}
}

// TestReplayRejectsEventsAfterTermination replays a hand-made history: a
// termination ends it, and nothing may follow.
func TestReplayRejectsEventsAfterTermination(t *testing.T) {
	t.Parallel()
	rp, err := engine.NewReplayer(engine.ReplayerOptions{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(rp, AwaitsApproval, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(rp, Add, activity.Options{}))
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	h := history.History{
		Version: history.FormatVersion, WorkflowID: "w", RunID: "r", WorkflowType: "AwaitsApproval",
		Events: []history.Event{
			{ID: 1, Time: at, Attributes: history.WorkflowStarted{WorkflowType: "AwaitsApproval", WorkflowID: "w", Queue: engine.DefaultQueue, Input: []byte("1")}},
			{ID: 2, Time: at, Attributes: history.WorkflowTerminated{Reason: "stuck"}},
		},
	}
	require.NoError(t, rp.Replay(context.Background(), h), "the code's unrecorded activity is not a divergence")
	h.Events = append(h.Events, history.Event{ID: 3, Time: at, Attributes: history.SignalReceived{Name: "approve", Payload: []byte(`"ada"`)}})
	require.ErrorContains(t, rp.Replay(context.Background(), h), "after the run was terminated")
}
