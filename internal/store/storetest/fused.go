package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// fusedStep is a commit that records the claimed activity task's completion
// (the run's next event, ID next) and then the commands cmds.
func fusedStep(run store.Run, task store.ActivityTask, next int64, now time.Time, cmds ...history.Attributes) store.CommitWorkflowTaskParams {
	done := history.ActivityCompleted{Seq: task.Seq, Result: json.RawMessage(`"ok"`), Attempt: task.Attempt}
	return store.CommitWorkflowTaskParams{
		RunID: run.RunID, WorkflowID: run.WorkflowID, WorkflowQueue: run.Queue, ProcessedEventID: next,
		Events: append([]history.Attributes{done}, cmds...), Now: now,
		Outcome: &store.Outcome{TaskID: task.ID, Attempt: task.Attempt},
	}
}

func testFusedStepRecordsOutcomeAndCommands(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	act := b.claimOneActivity(t, b.now)
	now := b.now.Add(time.Second)
	ev, next := activity(run, 2, 0)
	next.RunAfter = now
	commit := fusedStep(run, act, 3, now, ev)
	commit.Activities = []store.NewActivityTask{next}

	ready, err := b.s.CommitWorkflowTask(b.ctx, commit)
	require.NoError(t, err)
	require.Equal(t, int64(3), ready.FirstEventID, "the outcome is event 3")
	require.Equal(t, []string{actQueue}, ready.ActivityQueues)
	events := b.events(t, run.RunID)
	requireIDsInOrder(t, events)
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "activity_scheduled"}, eventTypes(events))
	requireTime(t, now, events[2].Time, "time of the completion")
	got := b.getRun(t, run.RunID)
	require.Equal(t, int64(4), got.LastEventID)
	require.Equal(t, store.StatusRunning, got.Status)

	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, now.Add(time.Hour)), "a fused step leaves no workflow task")
	acts := b.claimActivity(t, worker, 10, now.Add(time.Hour))
	require.Len(t, acts, 1, "the completed task is gone and the new one is ready")
	require.Equal(t, int64(2), acts[0].Seq)
	require.ErrorIs(t, b.resolve(completion(act, now)), store.ErrLeaseLost, "the outcome is recorded once")
}

func testFusedStepRefusesAStaleAttempt(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	first := b.claimOneActivity(t, b.now)
	later := b.now.Add(actLease + time.Second)
	second := b.claimOneActivity(t, later) // the first attempt's lease ran out
	require.Equal(t, first.ID, second.ID)

	err := b.commit(fusedStep(run, first, 3, later))
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Len(t, b.events(t, run.RunID), 2, "nothing appended")
	require.NoError(t, b.resolve(completion(second, later)), "the current attempt still holds the task")
}

func testFusedStepRefusedWhenRunMovedOn(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	act := b.claimOneActivity(t, b.now)
	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.SignalReceived{Name: "cancel-order", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	err = b.commit(fusedStep(run, act, 3, b.now))
	require.ErrorIs(t, err, store.ErrRunMoved, "event 3 is the signal")
	require.Equal(t, int64(3), b.getRun(t, run.RunID).LastEventID, "nothing appended")
	require.NoError(t, b.resolve(completion(act, b.now)), "the claim still holds: the outcome is recorded on its own")
	require.Equal(t, run.RunID, b.claimOneWorkflow(t, wfQueue, b.now).RunID)
}

func testFusedCloseCompletesRun(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	act := b.claimOneActivity(t, b.now)
	now := b.now.Add(time.Second)
	commit := fusedStep(run, act, 3, now, history.WorkflowCompleted{Result: json.RawMessage(`"done"`)})
	commit.Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"done"`)}

	ready, err := b.s.CommitWorkflowTask(b.ctx, commit)
	require.NoError(t, err)
	require.Equal(t, run.RunID, ready.ClosedRun)
	got := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusCompleted, got.Status)
	require.JSONEq(t, `"done"`, string(got.Result))
	require.NotNil(t, got.ClosedAt)
	requireTime(t, now, *got.ClosedAt, "ClosedAt")
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "workflow_completed"}, eventTypes(b.events(t, run.RunID)))
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, now.Add(time.Hour)))
	require.Empty(t, b.claimActivity(t, worker, 10, now.Add(time.Hour)))
}

func testFusedCloseRefusedWhileOtherActivitiesPend(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 2, 0)
	acts := b.claimActivity(t, worker, 1, b.now)
	require.Len(t, acts, 1)
	commit := fusedStep(run, acts[0], 4, b.now, history.WorkflowCompleted{})
	commit.Close = &store.CloseRun{Status: store.StatusCompleted}

	require.ErrorIs(t, b.commit(commit), store.ErrRunMoved, "the general close deletes the other activity in lock order")
	require.Equal(t, store.StatusRunning, b.getRun(t, run.RunID).Status)
	require.Len(t, b.events(t, run.RunID), 3)
}

func testFusedCommitRejectsOtherShapes(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	act := b.claimOneActivity(t, b.now)
	commit := fusedStep(run, act, 3, b.now, history.ChildWorkflowScheduled{Seq: 2, WorkflowID: "child", WorkflowType: "Child"})
	commit.Children = []store.NewChild{{Seq: 2, RunID: uuid.NewString(), WorkflowID: "child", WorkflowType: "Child", Queue: wfQueue, Input: json.RawMessage(`1`)}}

	err := b.commit(commit)
	require.Error(t, err)
	require.False(t, errors.Is(err, store.ErrRunMoved) || errors.Is(err, store.ErrLeaseLost), "a caller's mistake, not a race: %v", err)
	require.Len(t, b.events(t, run.RunID), 2, "nothing appended")
}

func testFusedStepStartsTimers(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	act := b.claimOneActivity(t, b.now)
	fireAt := b.now.Add(time.Hour)
	commit := fusedStep(run, act, 3, b.now, history.TimerStarted{Seq: 2, FireAt: fireAt})
	commit.Timers = []store.NewTimer{{Seq: 2, FireAt: fireAt}}

	ready, err := b.s.CommitWorkflowTask(b.ctx, commit)
	require.NoError(t, err)
	require.NotNil(t, ready.TimerAt, "the scanner is told of the timer")
	requireTime(t, fireAt, *ready.TimerAt, "the timer's fire time")
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "timer_started"}, eventTypes(b.events(t, run.RunID)))
}

// testReadyQueuesAreNamedOnce: a commit, plain or fused, that makes several
// activities of one queue ready names the queue once.
func testReadyQueuesAreNamedOnce(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	ev1, act1 := activity(run, 1, 0)
	ev2, act2 := activity(run, 2, 0)
	act1.RunAfter, act2.RunAfter = b.now, b.now
	ready, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 1,
		Events: []history.Attributes{ev1, ev2}, Activities: []store.NewActivityTask{act1, act2}, Now: b.now,
	})
	require.NoError(t, err)
	require.Equal(t, []string{actQueue}, ready.ActivityQueues, "plain")

	claimed := b.claimActivity(t, worker, 1, b.now)
	require.Len(t, claimed, 1)
	act := claimed[0]
	now := b.now.Add(time.Second)
	ev3, act3 := activity(run, 3, 0)
	ev4, act4 := activity(run, 4, 0)
	act3.RunAfter, act4.RunAfter = now, now
	commit := fusedStep(run, act, 4, now, ev3, ev4)
	commit.Activities = []store.NewActivityTask{act3, act4}
	ready, err = b.s.CommitWorkflowTask(b.ctx, commit)
	require.NoError(t, err)
	require.Equal(t, []string{actQueue}, ready.ActivityQueues, "fused")
}
