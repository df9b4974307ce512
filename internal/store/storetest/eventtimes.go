package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// Each appended event is stamped with its writer's Now, but never earlier
// than the run's last event: a writer whose clock is a little behind
// another's does not make a history go back in time. Every way of
// appending is tried, each with a Now before the run's last event.
func testEventTimesNeverGoBack(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	ahead := b.now.Add(10 * time.Second)
	behind := func(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }
	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: ahead},
		history.SignalReceived{Name: "go", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	// A step that schedules two activities (events 3 and 4).
	task := b.claimOneWorkflow(t, wfQueue, ahead)
	commit := store.CommitWorkflowTaskParams{RunID: run.RunID, Token: task.Token, ProcessedEventID: 2, Now: behind(1)}
	for seq := int64(1); seq <= 2; seq++ {
		ev, at := activity(run, seq, 0)
		at.RunAfter = behind(1)
		commit.Events = append(commit.Events, ev)
		commit.Activities = append(commit.Activities, at)
	}
	require.NoError(t, b.commit(commit))
	acts := b.claimActivity(t, worker, 10, ahead)
	require.Len(t, acts, 2)
	// A fused step: the first activity's outcome (event 5).
	require.NoError(t, b.commit(fusedStep(run, acts[0], 5, behind(2))))
	// An outcome on its own (event 6).
	require.NoError(t, b.resolve(completion(acts[1], behind(3))))
	// A commit that starts a timer (event 7).
	task = b.claimOneWorkflow(t, wfQueue, ahead)
	fire := ahead.Add(time.Hour)
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 6, Now: behind(4),
		Events: []history.Attributes{history.TimerStarted{Seq: 3, FireAt: fire}},
		Timers: []store.NewTimer{{Seq: 3, FireAt: fire}},
	}))
	// A termination (event 8).
	_, err = b.s.TerminateRun(b.ctx, store.TerminateParams{WorkflowID: run.WorkflowID, Reason: "done", Now: behind(5)})
	require.NoError(t, err)

	events := b.events(t, run.RunID)
	require.Equal(t, []string{"workflow_started", "signal_received", "activity_scheduled", "activity_scheduled",
		"activity_completed", "activity_completed", "timer_started", "workflow_terminated"}, eventTypes(events))
	for _, ev := range events[1:] {
		require.False(t, ev.Time.Before(ahead), "event %d (%s) at %v is before event 2 at %v",
			ev.ID, ev.Type(), ev.Time, ahead)
	}
}
