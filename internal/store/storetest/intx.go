package storetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// InTx's writes take effect together or not at all: a start and a signal
// to it (SignalWithStart) roll back together when fn fails, and commit
// together when it returns nil; inside, each call sees the ones before it.
func testInTxCommitsAllOrNothing(t *testing.T, b *bundle) {
	startAndSignal := func(workflowID string, fail error) (store.Run, error) {
		var run store.Run
		err := b.s.InTx(b.ctx, func(s store.Store) error {
			var err error
			run, err = s.CreateRun(b.ctx, store.CreateRunParams{
				RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "Order", Queue: wfQueue,
				Input: json.RawMessage(`1`), Now: b.now,
			})
			if err != nil {
				return err
			}
			if _, err := s.SignalRun(b.ctx, store.SignalParams{WorkflowID: workflowID, Now: b.now},
				history.SignalReceived{Name: "go", Payload: json.RawMessage(`2`)}); err != nil {
				return err
			}
			return fail
		})
		return run, err
	}

	boom := errors.New("boom")
	_, err := startAndSignal("rolled-back", boom)
	require.ErrorIs(t, err, boom, "InTx returns fn's error")
	_, err = b.s.GetRunByWorkflowID(b.ctx, "rolled-back")
	require.ErrorIs(t, err, store.ErrNotFound, "the start rolled back with the failed fn")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now), "no task of the rolled-back run")

	run, err := startAndSignal("committed", nil)
	require.NoError(t, err)
	events, err := b.s.ListEvents(b.ctx, run.RunID, 0)
	require.NoError(t, err)
	require.Len(t, events, 2, "the start and the signal, committed together")
	require.IsType(t, history.WorkflowStarted{}, events[0].Attributes)
	require.IsType(t, history.SignalReceived{}, events[1].Attributes)
}
