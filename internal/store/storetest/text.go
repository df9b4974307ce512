package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// unstorable holds what PostgreSQL's text and jsonb cannot: a NUL byte and
// a byte that is not UTF-8; escaped is how a store records it.
const (
	unstorable = "declined \x00 \xff"
	escaped    = `declined \x00 \xff`
)

func testErrorTextsAreStoredEscaped(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 2, 0)
	acts := b.claimActivity(t, worker, 10, b.now)
	require.Len(t, acts, 2)

	failure := history.Failure{Message: unstorable, Class: "permanent", Attempts: 1, Stack: unstorable}
	require.NoError(t, b.resolve(store.ResolveActivityParams{
		TaskID: acts[1].ID, Attempt: acts[1].Attempt, Now: b.now, Event: history.ActivityFailed{Seq: acts[1].Seq, Failure: failure},
	}))
	events := b.events(t, run.RunID)
	failed, ok := events[len(events)-1].Attributes.(history.ActivityFailed)
	require.True(t, ok, "events: %v", eventTypes(events))
	require.Equal(t, history.Failure{Message: escaped, Class: "permanent", Attempts: 1, Stack: escaped}, failed.Failure)

	retryAt := b.now.Add(time.Second)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: acts[0].ID, Attempt: acts[0].Attempt, RunAfter: retryAt, Error: unstorable, ErrorClass: unstorable, Now: b.now,
	}))
	again := b.claimOneActivity(t, retryAt)
	require.Equal(t, escaped, again.LastError)

	_, err := b.s.TerminateRun(b.ctx, store.TerminateParams{WorkflowID: run.WorkflowID, Reason: unstorable, Now: b.now})
	require.NoError(t, err)
	closed := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusTerminated, closed.Status)
	require.NotNil(t, closed.Failure)
	require.Equal(t, "terminated: "+escaped, closed.Failure.Message)
	events = b.events(t, run.RunID)
	require.Equal(t, history.WorkflowTerminated{Reason: escaped}, events[len(events)-1].Attributes)
}

func testUnstorablePayloadIsRefusedAndChangesNothing(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.SignalReceived{Name: "approve", Payload: json.RawMessage(`"a\u0000b"`)})
	require.ErrorIs(t, err, store.ErrUnstorable)
	require.ErrorContains(t, err, `signal_received event field "payload"`)
	require.ErrorContains(t, err, "NUL character")
	require.Equal(t, int64(1), b.getRun(t, run.RunID).LastEventID, "nothing was written")

	_, err = b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.SignalReceived{Name: "approve", Payload: json.RawMessage(`"a\\u0000b"`)})
	require.NoError(t, err, "an escaped backslash before u0000 is text like any other")
}
