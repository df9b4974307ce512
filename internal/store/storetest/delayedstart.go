package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// createRunAt starts a run of workflow "Order" on wfQueue at b.now whose
// first workflow task is held until startAt.
func (b *bundle) createRunAt(t *testing.T, workflowID string, startAt time.Time) store.Run {
	t.Helper()
	run, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "Order", Queue: wfQueue,
		Input: json.RawMessage(`{"order":1}`), Now: b.now, StartAt: startAt,
	})
	require.NoError(t, err)
	return run
}

// A run started with StartAt is recorded at once (its workflow ID taken,
// its start event written), but its first workflow task becomes ready only
// at StartAt. A signal meanwhile is kept for that task and does not end the
// delay. Run.FirstTaskAt says when the task is due until a worker claims it.
func testCreateRunWithStartAtHoldsTheFirstTask(t *testing.T, b *bundle) {
	startAt := b.now.Add(10 * time.Minute)
	run := b.createRunAt(t, "order-1", startAt)
	require.Zero(t, run.Token)
	got := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusRunning, got.Status)
	requireTime(t, b.now, got.CreatedAt, "CreatedAt")
	require.NotNil(t, got.FirstTaskAt, "the first task is due later")
	requireTime(t, startAt, *got.FirstTaskAt, "FirstTaskAt")
	require.Equal(t, []string{"workflow_started"}, eventTypes(b.events(t, run.RunID)))
	requireTime(t, b.now, b.events(t, run.RunID)[0].Time, "the start is recorded at once")

	_, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: wfQueue,
		Input: json.RawMessage(`{}`), Now: b.now,
	})
	require.ErrorIs(t, err, store.ErrConflict, "the held run takes its workflow ID")

	due, ok, err := b.s.NextDue(b.ctx, "workflow", wfQueue)
	require.NoError(t, err)
	require.True(t, ok)
	requireTime(t, startAt, due, "NextDue")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now), "held")

	signalAt := b.now.Add(time.Minute)
	_, err = b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: signalAt},
		history.SignalReceived{Name: "rush", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, signalAt), "a signal does not end the delay")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, startAt.Add(-time.Microsecond)), "held until StartAt")
	got = b.getRun(t, run.RunID)
	require.NotNil(t, got.FirstTaskAt)
	requireTime(t, startAt, *got.FirstTaskAt, "FirstTaskAt after the signal")

	task := b.claimOneWorkflow(t, wfQueue, startAt)
	require.Equal(t, run.RunID, task.RunID)
	require.Equal(t, []string{"workflow_started", "signal_received"}, eventTypes(task.Events),
		"the first task gets the signal with the start")
	require.Nil(t, b.getRun(t, run.RunID).FirstTaskAt, "claimed: no longer due")
}

// A StartAt that is not after Now starts the run at once, as no StartAt
// does; FirstTaskAt is then the start.
func testCreateRunWithPastStartAtStartsAtOnce(t *testing.T, b *bundle) {
	past := b.createRunAt(t, "order-1", b.now.Add(-time.Hour))
	plain := b.createRun(t, "order-2", wfQueue)
	for _, run := range []store.Run{past, plain} {
		got := b.getRun(t, run.RunID)
		require.NotNil(t, got.FirstTaskAt, run.WorkflowID)
		requireTime(t, b.now, *got.FirstTaskAt, run.WorkflowID+" FirstTaskAt")
	}
	require.Len(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now), 2)
}

// A held run is terminated at once: its held task goes with it.
func testTerminateEndsAHeldRun(t *testing.T, b *bundle) {
	startAt := b.now.Add(10 * time.Minute)
	run := b.createRunAt(t, "order-1", startAt)
	_, err := b.s.TerminateRun(b.ctx, store.TerminateParams{WorkflowID: run.WorkflowID, Reason: "not needed", Now: b.now})
	require.NoError(t, err)
	got := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusTerminated, got.Status)
	require.NotNil(t, got.ClosedAt)
	requireTime(t, b.now, *got.ClosedAt, "ClosedAt")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, startAt.Add(time.Hour)), "the held task is gone")
	_, ok, err := b.s.NextDue(b.ctx, "workflow", wfQueue)
	require.NoError(t, err)
	require.False(t, ok, "nothing is due")
}
