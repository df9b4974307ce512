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

func testCreateRunAppendsStartedEventAndReadyTask(t *testing.T, b *bundle) {
	in := store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: wfQueue,
		Input: json.RawMessage(`{"order": 1, "items": ["a", "b"]}`), Now: b.now,
	}
	created, err := b.s.CreateRun(b.ctx, in)
	require.NoError(t, err)

	for name, run := range map[string]store.Run{"CreateRun": created, "GetRun": b.getRun(t, in.RunID)} {
		require.Equal(t, in.RunID, run.RunID, name)
		require.Equal(t, in.WorkflowID, run.WorkflowID, name)
		require.Equal(t, in.WorkflowType, run.WorkflowType, name)
		require.Equal(t, in.Queue, run.Queue, name)
		require.Equal(t, store.StatusRunning, run.Status, name)
		require.JSONEq(t, string(in.Input), string(run.Input), name)
		require.Empty(t, run.Result, name)
		require.Nil(t, run.Failure, name)
		requireTime(t, b.now, run.CreatedAt, name+" CreatedAt")
		requireTime(t, b.now, run.UpdatedAt, name+" UpdatedAt")
		require.Nil(t, run.ClosedAt, name)
		require.Equal(t, int64(1), run.LastEventID, name)
		require.Empty(t, run.TaskError, name)
		require.Zero(t, run.TaskAttempts, name)
	}

	events := b.events(t, in.RunID)
	require.Len(t, events, 1)
	require.Equal(t, int64(1), events[0].ID)
	requireTime(t, b.now, events[0].Time, "event time")
	started, ok := events[0].Attributes.(history.WorkflowStarted)
	require.True(t, ok, "event 1 is %T, want WorkflowStarted", events[0].Attributes)
	require.Equal(t, in.WorkflowType, started.WorkflowType)
	require.Equal(t, in.WorkflowID, started.WorkflowID)
	require.Equal(t, in.Queue, started.Queue)
	require.JSONEq(t, string(in.Input), string(started.Input))

	task := b.claimOneWorkflow(t, wfQueue, b.now)
	require.Equal(t, store.WorkflowTask{
		RunID: in.RunID, WorkflowID: in.WorkflowID, WorkflowType: in.WorkflowType, Queue: in.Queue,
		Token: task.Token, LockedUntil: b.now.Add(wfLease), ProcessedEventID: 0, Attempts: 0, Events: events,
	}, task, "the claim of the run's first task brings its history and its lease")
}

func testCreateRunSameWorkflowIDReturnsOpenRunAndErrConflict(t *testing.T, b *bundle) {
	first := b.createRun(t, "order-1", wfQueue)

	second, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: wfQueue,
		Input: json.RawMessage(`{}`), Now: b.now.Add(time.Second),
	})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, first.RunID, second.RunID, "CreateRun returns the open run")
	require.Equal(t, store.StatusRunning, second.Status)
	requireTime(t, b.now, second.CreatedAt, "CreatedAt of the open run")

	latest, err := b.s.GetRunByWorkflowID(b.ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, first.RunID, latest.RunID, "no second run was made")
	require.Len(t, b.events(t, first.RunID), 1)
	require.Len(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now.Add(time.Second)), 1, "one workflow task only")
}

func testCreateRunAfterCloseStartsNewRun(t *testing.T, b *bundle) {
	first := b.createRun(t, "order-1", wfQueue)
	b.closeRun(t, first, b.now)

	b.now = b.now.Add(time.Second)
	second := b.createRun(t, "order-1", wfQueue)
	require.NotEqual(t, first.RunID, second.RunID)
	require.Equal(t, store.StatusRunning, second.Status)
	require.Equal(t, store.StatusCompleted, b.getRun(t, first.RunID).Status, "the first run stays closed")
	require.Equal(t, []string{"workflow_started"}, eventTypes(b.events(t, second.RunID)))
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	require.Equal(t, second.RunID, task.RunID)
}

func testGetRunNotFound(t *testing.T, b *bundle) {
	b.createRun(t, "order-1", wfQueue)

	_, err := b.s.GetRun(b.ctx, uuid.NewString())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.s.GetRunByWorkflowID(b.ctx, "order-2")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testGetRunByWorkflowIDReturnsNewest(t *testing.T, b *bundle) {
	var runs []store.Run
	for i := range 3 {
		run := b.createRun(t, "order-1", wfQueue)
		runs = append(runs, run)
		latest, err := b.s.GetRunByWorkflowID(b.ctx, "order-1")
		require.NoError(t, err)
		require.Equal(t, run.RunID, latest.RunID, "newest of %d runs", i+1)
		require.Equal(t, store.StatusRunning, latest.Status)
		b.closeRun(t, run, b.now)
		b.now = b.now.Add(time.Minute)
	}
	latest, err := b.s.GetRunByWorkflowID(b.ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, runs[2].RunID, latest.RunID, "newest of the closed runs")
	require.Equal(t, store.StatusCompleted, latest.Status)
}

// A continuation started at the instant its predecessor closed (a frozen
// test clock) is still the newest run.
func testGetRunByWorkflowIDPrefersTheContinuation(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	next := "ffffffff-ffff-4fff-bfff-ffffffffffff" // sorts after any other run ID
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: b.now,
		Events:     []history.Attributes{history.WorkflowContinuedAsNew{Input: json.RawMessage(`2`)}},
		Close:      &store.CloseRun{Status: store.StatusContinuedAsNew},
		ContinueAs: &store.NewRun{RunID: next, Input: json.RawMessage(`2`)},
	}))
	latest, err := b.s.GetRunByWorkflowID(b.ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, next, latest.RunID)
}

func testListEventsAfterID(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 3, 0)

	all := b.events(t, run.RunID)
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_scheduled", "activity_scheduled"}, eventTypes(all))
	requireIDsInOrder(t, all)

	tail, err := b.s.ListEvents(b.ctx, run.RunID, 2)
	require.NoError(t, err)
	require.Equal(t, all[2:], tail)

	none, err := b.s.ListEvents(b.ctx, run.RunID, 4)
	require.NoError(t, err)
	require.Empty(t, none)

	other, err := b.s.ListEvents(b.ctx, uuid.NewString(), 0)
	require.NoError(t, err, "an unknown run has no events")
	require.Empty(t, other)
}

func testCreateRunClaimAsHandsOffFirstTask(t *testing.T, b *bundle) {
	run, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: wfQueue,
		Input: json.RawMessage(`{"order":1}`), Now: b.now, ClaimAs: worker, Lease: wfLease,
	})
	require.NoError(t, err)
	require.NotZero(t, run.Token, "the first task was claimed for the starter")
	require.Equal(t, []string{"workflow_started"}, eventTypes(b.events(t, run.RunID)))
	require.Empty(t, b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now.Add(wfLease-time.Second)),
		"nobody else claims a handed-off task while its lease holds")

	// The claim fences like any other: once its lease is gone and the task is
	// claimed again, the starter's token writes nothing.
	later := b.now.Add(wfLease + time.Second)
	again := b.claimOneWorkflow(t, wfQueue, later)
	require.NotEqual(t, run.Token, again.Token)
	ev, _ := activity(run, 1, 0)
	commit := store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: run.Token, ProcessedEventID: 1, Events: []history.Attributes{ev}, Now: later,
	}
	require.ErrorIs(t, b.commit(commit), store.ErrLeaseLost)
	commit.Token = again.Token
	require.NoError(t, b.commit(commit))
	require.Equal(t, []string{"workflow_started", "activity_scheduled"}, eventTypes(b.events(t, run.RunID)))

	plain := b.createRun(t, "order-2", wfQueue)
	require.Zero(t, plain.Token, "without ClaimAs the first task is left ready")
}

func testCreateRunWithFirstTaskRecordsItsCommands(t *testing.T, b *bundle) {
	runID := uuid.NewString()
	ev, act := activity(store.Run{RunID: runID}, 1, 0)
	act.RunAfter, act.ClaimAs = b.now, worker
	first := store.CommitWorkflowTaskParams{
		RunID: runID, WorkflowID: "order-1", WorkflowQueue: wfQueue, ProcessedEventID: 1, Now: b.now,
		Events: []history.Attributes{ev}, Activities: []store.NewActivityTask{act},
	}
	in := store.CreateRunParams{
		RunID: runID, WorkflowID: "order-1", WorkflowType: "Order", Queue: wfQueue,
		Input: json.RawMessage(`{"id":1}`), Now: b.now, First: &first,
	}
	run, err := b.s.CreateRun(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, int64(2), run.LastEventID)
	require.Len(t, run.Ready.ActivityTasks, 1, "the activity was claimed for the starter")
	require.Equal(t, int64(1), run.Ready.ActivityTasks[0].Seq)
	events := b.events(t, runID)
	requireIDsInOrder(t, events)
	require.Equal(t, []string{"workflow_started", "activity_scheduled"}, eventTypes(events))
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now.Add(time.Hour)), "no workflow task: the first ran")
	require.Empty(t, b.claimActivity(t, "worker-2", 10, b.now), "the activity is claimed")

	// The same workflow ID again: the open run, and nothing of the new one.
	again := in
	again.RunID = uuid.NewString()
	f2 := first
	f2.RunID = again.RunID
	again.First = &f2
	got, err := b.s.CreateRun(b.ctx, again)
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, runID, got.RunID)
	_, err = b.s.GetRun(b.ctx, again.RunID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A run names the engine that may wait for its close (its starter); an
// engine that waits too makes it "*". Each close says whom it concerns,
// whether it is a plain close or a fused one.
func testRunWaiterSaysWhoWaitsForTheClose(t *testing.T, b *bundle) {
	start := func(workflowID, waiter string) store.Run {
		t.Helper()
		run, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
			RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "Order", Queue: wfQueue,
			Input: json.RawMessage(`1`), Now: b.now, Waiter: waiter,
		})
		require.NoError(t, err)
		require.Equal(t, waiter, run.Waiter)
		require.Equal(t, waiter, b.getRun(t, run.RunID).Waiter)
		return run
	}
	closeRun := func(run store.Run) store.Ready {
		t.Helper()
		task := b.claimOneWorkflow(t, wfQueue, b.now)
		require.Equal(t, run.RunID, task.RunID)
		ready, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
			RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: b.now,
			Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`2`)}},
			Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`2`)},
		})
		require.NoError(t, err)
		require.Equal(t, run.RunID, ready.ClosedRun)
		return ready
	}

	mine := start("mine", "engine-a")
	require.Equal(t, "engine-a", closeRun(mine).CloseWaiter, "only its starter waits")
	watched, err := b.s.WatchRun(b.ctx, mine.RunID)
	require.NoError(t, err)
	require.False(t, watched, "a closed run is not waited for")

	shared := start("shared", "engine-a")
	watched, err = b.s.WatchRun(b.ctx, shared.RunID)
	require.NoError(t, err)
	require.True(t, watched)
	require.Equal(t, "*", b.getRun(t, shared.RunID).Waiter)
	require.Equal(t, "*", closeRun(shared).CloseWaiter, "another engine waits too")

	anyone := start("anyone", "")
	require.Empty(t, closeRun(anyone).CloseWaiter, "unnamed: anyone may wait")

	watched, err = b.s.WatchRun(b.ctx, uuid.NewString())
	require.NoError(t, err)
	require.False(t, watched, "no such run")

	// A fused close says the same.
	fused := b.runWithActivities(t, "fused", 1, 0)
	watched, err = b.s.WatchRun(b.ctx, fused.RunID)
	require.NoError(t, err)
	require.True(t, watched)
	act := b.claimOneActivity(t, b.now)
	commit := fusedStep(fused, act, 3, b.now, history.WorkflowCompleted{Result: json.RawMessage(`"done"`)})
	commit.Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"done"`)}
	ready, err := b.s.CommitWorkflowTask(b.ctx, commit)
	require.NoError(t, err)
	require.Equal(t, fused.RunID, ready.ClosedRun)
	require.Equal(t, "*", ready.CloseWaiter)
}

func testNotRunningNamesClosedAndUnknownRuns(t *testing.T, b *bundle) {
	closed := b.createRun(t, "closed", wfQueue)
	b.closeRun(t, closed, b.now)
	open := b.createRun(t, "open", wfQueue)
	unknown := uuid.NewString()

	gone, err := b.s.NotRunning(b.ctx, []string{open.RunID, closed.RunID, unknown, "not-a-run-id"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{closed.RunID, unknown, "not-a-run-id"}, gone)

	gone, err = b.s.NotRunning(b.ctx, []string{open.RunID})
	require.NoError(t, err)
	require.Empty(t, gone, "a running run is running")

	gone, err = b.s.NotRunning(b.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, gone)
}
