package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

func testClaimSkipsLockedTask(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)

	tasks := b.claimWorkflow(t, wfQueue, "worker-1", 10, b.now)
	require.Len(t, tasks, 1)
	require.Equal(t, run.RunID, tasks[0].RunID)

	require.Empty(t, b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now), "the task is claimed")
	require.Empty(t, b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now.Add(wfLease-time.Microsecond)), "the lease still holds")
}

func testClaimRespectsLimitAndQueue(t *testing.T, b *bundle) {
	want := map[string]bool{}
	for i := range 3 {
		want[b.createRun(t, fmt.Sprintf("order-%d", i), wfQueue).RunID] = true
	}
	other := b.createRun(t, "invoice-1", "other")

	got := map[string]bool{}
	for _, wantLen := range []int{2, 1, 0} {
		tasks := b.claimWorkflow(t, wfQueue, worker, 2, b.now)
		require.Len(t, tasks, wantLen, "claim with limit 2 after %d claimed of 3", len(got))
		for _, task := range tasks {
			require.Equal(t, wfQueue, task.Queue)
			require.False(t, got[task.RunID], "run %s claimed twice", task.RunID)
			got[task.RunID] = true
		}
	}
	require.Equal(t, want, got)

	task := b.claimOneWorkflow(t, "other", b.now)
	require.Equal(t, other.RunID, task.RunID)
	require.Equal(t, "other", task.Queue)
}

// A claim returns the whole history of a run whose first task it takes,
// read after the claim (a signal that came first included); a later task's
// history is the worker's to read, from where its cache of the run ends.
func testClaimReturnsAFirstTasksHistory(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.SignalReceived{Name: "rush", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	other := b.createRun(t, "order-2", wfQueue)
	got := map[string][]history.Event{}
	for _, task := range b.claimWorkflow(t, wfQueue, worker, 10, b.now) {
		got[task.RunID] = task.Events
	}
	require.Equal(t, map[string][]history.Event{run.RunID: b.events(t, run.RunID), other.RunID: b.events(t, other.RunID)}, got)
	require.Equal(t, []string{"workflow_started", "signal_received"}, eventTypes(got[run.RunID]))

	later, task, _ := b.runWithClaimedTask(t, "order-3")
	now := b.now.Add(2 * time.Second)
	_, err = b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: later.RunID, Token: task.Token, ProcessedEventID: 4, Now: now,
		Events: []history.Attributes{history.SideEffectRecorded{Seq: 3, Value: json.RawMessage(`1`)}},
	})
	require.NoError(t, err)
	_, err = b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: later.WorkflowID, Now: now},
		history.SignalReceived{Name: "rush", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	again := b.claimOneWorkflow(t, wfQueue, now)
	require.Equal(t, later.RunID, again.RunID)
	require.Empty(t, again.Events, "the run's first task consumed its events: the worker may have them cached")
}

func testExpiredLeaseIsClaimedAgainWithNewToken(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	first := b.claimOneWorkflow(t, wfQueue, b.now)

	require.Empty(t, b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now.Add(wfLease-time.Second)))
	again := b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now.Add(wfLease+time.Second))
	require.Len(t, again, 1, "the lease ran out")
	require.Equal(t, run.RunID, again[0].RunID)
	require.NotEqual(t, first.Token, again[0].Token, "a new claim gets a new token")
	require.Equal(t, first.ProcessedEventID, again[0].ProcessedEventID)
	require.Zero(t, again[0].Attempts, "a lost lease is not a failure")
}

func testCommitRejectsStaleToken(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	first := b.claimOneWorkflow(t, wfQueue, b.now)
	later := b.now.Add(wfLease + time.Second)
	second := b.claimOneWorkflow(t, wfQueue, later)

	ev, act := activity(run, 1, 0)
	act.RunAfter = later
	stale := store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: first.Token, ProcessedEventID: 1,
		Events: []history.Attributes{ev}, Activities: []store.NewActivityTask{act},
		Close: &store.CloseRun{Status: store.StatusCompleted}, Now: later,
	}
	require.ErrorIs(t, b.commit(stale), store.ErrLeaseLost)

	require.Equal(t, []string{"workflow_started"}, eventTypes(b.events(t, run.RunID)), "the stale commit appended nothing")
	got := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusRunning, got.Status, "the stale commit did not close the run")
	require.Equal(t, int64(1), got.LastEventID)
	require.Empty(t, b.claimActivity(t, worker, 10, later.Add(time.Hour)), "the stale commit created no activity")
	require.ErrorIs(t, b.s.FailWorkflowTask(b.ctx, store.FailWorkflowTaskParams{
		RunID: run.RunID, Token: first.Token, Error: "boom", RunAfter: later, Now: later,
	}), store.ErrLeaseLost)
	require.Empty(t, b.getRun(t, run.RunID).TaskError, "the stale failure was not kept")

	fresh := stale
	fresh.Token = second.Token
	require.NoError(t, b.commit(fresh), "the current claim still commits")
	require.Equal(t, []string{"workflow_started", "activity_scheduled"}, eventTypes(b.events(t, run.RunID)))
}

func testCommitAppendsEventsCreatesActivitiesAndDeletesTask(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	task := b.claimOneWorkflow(t, wfQueue, b.now)

	now := b.now.Add(time.Second)
	ev1, act1 := activity(run, 1, 3)
	act1.RunAfter = now
	ev2, act2 := activity(run, 2, 0)
	act2.RunAfter = now.Add(time.Hour)
	fireAt := now.Add(24 * time.Hour)
	ready, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 1,
		Events: []history.Attributes{
			ev1, ev2,
			history.TimerStarted{Seq: 3, FireAt: fireAt},
			history.SideEffectRecorded{Seq: 4, Value: json.RawMessage(`42`)},
		},
		Activities: []store.NewActivityTask{act1, act2},
		Timers:     []store.NewTimer{{Seq: 3, FireAt: fireAt}},
		Now:        now,
	})
	require.NoError(t, err)
	require.Equal(t, []string{actQueue}, ready.ActivityQueues, "activity 1 is ready now")
	require.Empty(t, ready.WorkflowQueues)
	require.Empty(t, ready.ClosedRun)
	require.NotNil(t, ready.TimerAt)
	requireTime(t, fireAt, *ready.TimerAt, "Ready.TimerAt")

	events := b.events(t, run.RunID)
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_scheduled", "timer_started", "side_effect_recorded"}, eventTypes(events))
	requireIDsInOrder(t, events)
	for _, e := range events[1:] {
		requireTime(t, now, e.Time, fmt.Sprintf("time of event %d", e.ID))
	}
	sched, ok := events[2].Attributes.(history.ActivityScheduled)
	require.True(t, ok)
	require.Equal(t, int64(2), sched.Seq)
	require.Equal(t, ev2.Activity, sched.Activity)
	require.JSONEq(t, string(ev2.Input), string(sched.Input))
	timer, ok := events[3].Attributes.(history.TimerStarted)
	require.True(t, ok)
	requireTime(t, fireAt, timer.FireAt, "timer fire_at")

	got := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusRunning, got.Status)
	require.Equal(t, int64(5), got.LastEventID)
	requireTime(t, now, got.UpdatedAt, "UpdatedAt")
	requireTime(t, b.now, got.CreatedAt, "CreatedAt")

	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, now.Add(48*time.Hour)), "no new events: the workflow task is gone")
	_, ok, err = b.s.NextDue(b.ctx, "workflow", wfQueue)
	require.NoError(t, err)
	require.False(t, ok, "no workflow task is due")

	a := b.claimOneActivity(t, now)
	require.Equal(t, run.RunID, a.RunID)
	require.Equal(t, run.WorkflowID, a.WorkflowID)
	require.Equal(t, int64(1), a.Seq)
	require.Equal(t, act1.Activity, a.Activity)
	require.Equal(t, actQueue, a.Queue)
	require.JSONEq(t, string(act1.Input), string(a.Input))
	require.JSONEq(t, string(act1.Options), string(a.Options))
	require.Equal(t, act1.IdempotencyKey, a.IdempotencyKey)
	require.Equal(t, 1, a.Attempt)
	require.Equal(t, 3, a.MaxAttempts)
	require.Zero(t, a.RateLimited)
	requireTime(t, now.Add(actLease), a.LockedUntil, "LockedUntil")
	require.Empty(t, a.LastError)

	require.NoError(t, b.resolve(completion(a, now)))
	require.Empty(t, b.claimActivity(t, worker, 10, act2.RunAfter.Add(-time.Microsecond)), "activity 2 waits for its RunAfter")
	a2 := b.claimOneActivity(t, act2.RunAfter)
	require.Equal(t, int64(2), a2.Seq)
	require.Equal(t, act2.IdempotencyKey, a2.IdempotencyKey)
	require.Zero(t, a2.MaxAttempts, "0 means unlimited")
}

func testCommitWithCloseClosesRun(t *testing.T, b *bundle) {
	ok := b.createRun(t, "order-ok", wfQueue)
	bad := b.createRun(t, "order-bad", wfQueue)
	tasks := map[string]store.WorkflowTask{}
	for _, task := range b.claimWorkflow(t, wfQueue, worker, 10, b.now) {
		tasks[task.RunID] = task
	}
	require.Len(t, tasks, 2)

	now := b.now.Add(time.Minute)
	failure := history.Failure{Message: "card declined", Class: "permanent"}
	commits := []store.CommitWorkflowTaskParams{{
		RunID: ok.RunID, Token: tasks[ok.RunID].Token, ProcessedEventID: 1, Now: now,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`{"paid":true}`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`{"paid":true}`)},
	}, {
		RunID: bad.RunID, Token: tasks[bad.RunID].Token, ProcessedEventID: 1, Now: now,
		Events: []history.Attributes{history.WorkflowFailed{Failure: failure}},
		Close:  &store.CloseRun{Status: store.StatusFailed, Failure: &failure},
	}}
	for _, c := range commits {
		ready, err := b.s.CommitWorkflowTask(b.ctx, c)
		require.NoError(t, err)
		require.Equal(t, store.Ready{ClosedRun: c.RunID, Closed: c.Close, FirstEventID: 2}, ready)
	}

	got := b.getRun(t, ok.RunID)
	require.Equal(t, store.StatusCompleted, got.Status)
	require.JSONEq(t, `{"paid":true}`, string(got.Result))
	require.Nil(t, got.Failure)
	require.NotNil(t, got.ClosedAt)
	requireTime(t, now, *got.ClosedAt, "ClosedAt")
	requireTime(t, now, got.UpdatedAt, "UpdatedAt")
	require.Equal(t, int64(2), got.LastEventID)
	require.Equal(t, []string{"workflow_started", "workflow_completed"}, eventTypes(b.events(t, ok.RunID)))

	got = b.getRun(t, bad.RunID)
	require.Equal(t, store.StatusFailed, got.Status)
	require.Empty(t, got.Result)
	require.Equal(t, &failure, got.Failure)
	require.NotNil(t, got.ClosedAt)
	requireTime(t, now, *got.ClosedAt, "ClosedAt")
	require.Equal(t, []string{"workflow_started", "workflow_failed"}, eventTypes(b.events(t, bad.RunID)))

	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, now.Add(time.Hour)), "a closed run has no workflow task")
	_, due, err := b.s.NextDue(b.ctx, "workflow", wfQueue)
	require.NoError(t, err)
	require.False(t, due)
	for _, c := range commits {
		require.ErrorIs(t, b.commit(c), store.ErrLeaseLost, "a closed run takes no more commits")
	}
	require.Len(t, b.events(t, ok.RunID), 2)
}

// runWithClaimedTask starts a run that scheduled two activities (events 2
// and 3), completes the first (event 4) and claims the workflow task that
// made ready. It returns the run, the claimed task and the second activity,
// claimed and still running.
func (b *bundle) runWithClaimedTask(t *testing.T, workflowID string) (store.Run, store.WorkflowTask, store.ActivityTask) {
	t.Helper()
	run := b.runWithActivities(t, workflowID, 2, 0)
	acts := b.claimActivity(t, worker, 10, b.now)
	require.Len(t, acts, 2)
	require.NoError(t, b.resolve(completion(acts[0], b.now.Add(time.Second))))
	task := b.claimOneWorkflow(t, wfQueue, b.now.Add(time.Second))
	require.Equal(t, run.RunID, task.RunID)
	return run, task, acts[1]
}

// runWithClaimedTaskAndNewEvent sets up the race CommitWorkflowTask must
// handle: a workflow task is claimed after activity 1 completed (event 4),
// and activity 2 completes (event 5) while the task runs. It returns the run
// and the claimed task.
func (b *bundle) runWithClaimedTaskAndNewEvent(t *testing.T) (store.Run, store.WorkflowTask) {
	t.Helper()
	run, task, pending := b.runWithClaimedTask(t, "order-1")
	require.NoError(t, b.resolve(completion(pending, b.now.Add(2*time.Second))),
		"an activity completes while its run's workflow task is claimed")
	require.Empty(t, b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now.Add(2*time.Second)), "the completion did not steal the claim")
	require.Equal(t, int64(5), b.getRun(t, run.RunID).LastEventID)
	return run, task
}

func testCommitKeepsTaskReadyWhenEventsArrivedMeanwhile(t *testing.T, b *bundle) {
	run, task := b.runWithClaimedTaskAndNewEvent(t)

	now := b.now.Add(3 * time.Second)
	ready, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 4, Now: now,
		Events: []history.Attributes{history.SideEffectRecorded{Seq: 3, Value: json.RawMessage(`1`)}},
	})
	require.NoError(t, err)
	require.Equal(t, []string{wfQueue}, ready.WorkflowQueues, "the commit made the workflow task ready again")
	events := b.events(t, run.RunID)
	require.Equal(t, []string{
		"workflow_started", "activity_scheduled", "activity_scheduled",
		"activity_completed", "activity_completed", "side_effect_recorded",
	}, eventTypes(events))
	requireIDsInOrder(t, events)

	again := b.claimWorkflow(t, wfQueue, "worker-2", 10, now)
	require.Len(t, again, 1, "event 5 arrived after the task's view: the task must be ready again")
	require.Equal(t, run.RunID, again[0].RunID)
	require.Equal(t, int64(4), again[0].ProcessedEventID)
	require.NotEqual(t, task.Token, again[0].Token)
	require.Zero(t, again[0].Attempts)

	ready, err = b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: again[0].Token, ProcessedEventID: 6, Now: now,
	})
	require.NoError(t, err)
	require.Equal(t, store.Ready{FirstEventID: 7}, ready, "nothing became ready")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, now.Add(time.Hour)), "nothing new: the task is gone")
	require.Equal(t, int64(6), b.getRun(t, run.RunID).LastEventID)
}

// testCommitWithNextEventIDRequiresTheHistoryItSaw checks the commit of a
// task that consumed events of its own: an activity that ran before its
// schedule committed, its outcome recorded after the schedule and what the
// code did next after that. It takes effect only on the history the task
// saw; otherwise it writes nothing and the claim still holds.
func testCommitWithNextEventIDRequiresTheHistoryItSaw(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	now := b.now.Add(time.Second)
	ev1, _ := activity(run, 1, 3)
	ev2, act2 := activity(run, 2, 0)
	act2.RunAfter = now
	merged := store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 3, NextEventID: 2, Now: now,
		Events:     []history.Attributes{ev1, history.ActivityCompleted{Seq: 1, Result: json.RawMessage(`7`), Attempt: 1}, ev2},
		Activities: []store.NewActivityTask{act2},
	}

	t.Run("Applies", func(t *testing.T) {
		ready, err := b.s.CommitWorkflowTask(b.ctx, merged)
		require.NoError(t, err)
		require.Equal(t, int64(2), ready.FirstEventID)
		require.Equal(t, []string{actQueue}, ready.ActivityQueues, "activity 2 is ready")
		events := b.events(t, run.RunID)
		require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "activity_scheduled"}, eventTypes(events))
		requireIDsInOrder(t, events)
		require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, now.Add(time.Hour)),
			"the task consumed every event it appended: it is gone, not ready again")
		acts := b.claimActivity(t, worker, 10, now)
		require.Len(t, acts, 1, "activity 1 ran before the commit: it has no task")
		require.Equal(t, int64(2), acts[0].Seq)
	})

	t.Run("RefusedWhenTheRunMovedOn", func(t *testing.T) {
		run := b.createRun(t, "order-2", wfQueue)
		task := b.claimOneWorkflow(t, wfQueue, b.now)
		_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
			history.SignalReceived{Name: "rush", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		c := merged
		c.RunID, c.Token, c.Activities = run.RunID, task.Token, nil
		c.Events = []history.Attributes{ev1, history.ActivityCompleted{Seq: 1, Result: json.RawMessage(`7`), Attempt: 1},
			history.WorkflowCompleted{Result: json.RawMessage(`7`)}}
		c.Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`7`)}
		require.ErrorIs(t, b.commit(c), store.ErrRunMoved, "a signal came after the history the task saw")
		require.Equal(t, []string{"workflow_started", "signal_received"}, eventTypes(b.events(t, run.RunID)), "nothing written")
		require.Equal(t, store.StatusRunning, b.getRun(t, run.RunID).Status)

		stale := c
		stale.Token = task.Token + 1000
		require.ErrorIs(t, b.commit(stale), store.ErrLeaseLost, "another token: the claim is not this one")

		require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
			RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: now, Events: []history.Attributes{ev1},
		}), "the claim still holds")
		require.Equal(t, []string{"workflow_started", "signal_received", "activity_scheduled"}, eventTypes(b.events(t, run.RunID)))
	})
}

// testSecondCommitWithSameTokenIsRejected checks that a commit ends its
// claim: the same token cannot commit twice (a retried commit must not append
// the commands again), whether the commit deleted the task or left it ready.
func testSecondCommitWithSameTokenIsRejected(t *testing.T, b *bundle) {
	t.Run("TaskDeleted", func(t *testing.T) {
		t.Parallel()
		b := &bundle{ctx: b.ctx, s: b.s, now: b.now}
		run := b.createRun(t, "order-deleted", "deleted")
		task := b.claimOneWorkflow(t, "deleted", b.now)
		commit := store.CommitWorkflowTaskParams{
			RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: b.now,
			Events: []history.Attributes{history.SideEffectRecorded{Seq: 1, Value: json.RawMessage(`1`)}},
		}
		require.NoError(t, b.commit(commit))
		require.ErrorIs(t, b.commit(commit), store.ErrLeaseLost)
		require.Len(t, b.events(t, run.RunID), 2, "the second commit appended nothing")
	})
	t.Run("TaskReadyAgain", func(t *testing.T) {
		t.Parallel()
		b := &bundle{ctx: b.ctx, s: b.s, now: b.now}
		run, task := b.runWithClaimedTaskAndNewEvent(t)
		commit := store.CommitWorkflowTaskParams{
			RunID: run.RunID, Token: task.Token, ProcessedEventID: 4, Now: b.now.Add(3 * time.Second),
			Events: []history.Attributes{history.SideEffectRecorded{Seq: 3, Value: json.RawMessage(`1`)}},
		}
		require.NoError(t, b.commit(commit))
		require.ErrorIs(t, b.commit(commit), store.ErrLeaseLost,
			"the task was completed: its token must not commit again")
		require.Len(t, b.events(t, run.RunID), 6, "the second commit appended nothing")
		require.ErrorIs(t, b.s.FailWorkflowTask(b.ctx, store.FailWorkflowTaskParams{
			RunID: run.RunID, Token: task.Token, Error: "late", RunAfter: commit.Now.Add(time.Hour), Now: commit.Now,
		}), store.ErrLeaseLost, "the task was completed: its token cannot fail the next one")
	})
}

// testCommitRacingCompletionLeavesTaskReady races, on many runs at once, a
// workflow task's commit against the completion of an activity of its run.
// Whichever goes first, no event is lost or numbered twice and the workflow
// task ends up ready, with the commit's ProcessedEventID.
func testCommitRacingCompletionLeavesTaskReady(t *testing.T, b *bundle) {
	const n = 16
	type race struct {
		run     store.Run
		task    store.WorkflowTask
		pending store.ActivityTask
	}
	races := make([]race, n)
	for i := range races {
		r := &races[i]
		r.run, r.task, r.pending = b.runWithClaimedTask(t, fmt.Sprintf("order-%d", i))
	}

	now := b.now.Add(2 * time.Second)
	start := make(chan struct{})
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i, r := range races {
		wg.Go(func() {
			<-start
			_, errs[2*i] = b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
				RunID: r.run.RunID, Token: r.task.Token, ProcessedEventID: 4, Now: now,
				Events: []history.Attributes{history.SideEffectRecorded{Seq: 3, Value: json.RawMessage(`1`)}},
			})
		})
		wg.Go(func() {
			<-start
			_, errs[2*i+1] = b.s.ResolveActivity(b.ctx, completion(r.pending, now))
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	ready := map[string]store.WorkflowTask{}
	for _, task := range b.claimWorkflow(t, wfQueue, "worker-2", 2*n, now) {
		ready[task.RunID] = task
	}
	for _, r := range races {
		events := b.events(t, r.run.RunID)
		require.Len(t, events, 6, "history of run %s", r.run.WorkflowID)
		requireIDsInOrder(t, events)
		require.ElementsMatch(t, []string{"activity_completed", "side_effect_recorded"}, eventTypes(events[4:]))
		task, ok := ready[r.run.RunID]
		require.True(t, ok, "run %s has an event its last task did not see, and no ready workflow task", r.run.WorkflowID)
		require.Equal(t, int64(4), task.ProcessedEventID)
	}
	require.Len(t, ready, n)
}

func testFailWorkflowTaskKeepsErrorAndDelays(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	first := b.claimOneWorkflow(t, wfQueue, b.now)

	retryAt := b.now.Add(10 * time.Second)
	require.NoError(t, b.s.FailWorkflowTask(b.ctx, store.FailWorkflowTaskParams{
		RunID: run.RunID, Token: first.Token, Error: "panic: boom", RunAfter: retryAt, Now: b.now.Add(time.Second),
	}))
	got := b.getRun(t, run.RunID)
	require.Equal(t, "panic: boom", got.TaskError)
	require.Equal(t, 1, got.TaskAttempts)
	require.Equal(t, store.StatusRunning, got.Status, "a failed task does not fail the run")
	require.Equal(t, []string{"workflow_started"}, eventTypes(b.events(t, run.RunID)))

	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, retryAt.Add(-time.Microsecond)), "the task waits for RunAfter")
	second := b.claimOneWorkflow(t, wfQueue, retryAt)
	require.Equal(t, 1, second.Attempts)
	require.NotEqual(t, first.Token, second.Token)
	require.ErrorIs(t, b.s.FailWorkflowTask(b.ctx, store.FailWorkflowTaskParams{
		RunID: run.RunID, Token: first.Token, Error: "stale", RunAfter: retryAt, Now: retryAt,
	}), store.ErrLeaseLost)

	retryAt = retryAt.Add(20 * time.Second)
	require.NoError(t, b.s.FailWorkflowTask(b.ctx, store.FailWorkflowTaskParams{
		RunID: run.RunID, Token: second.Token, Error: "panic: boom again", RunAfter: retryAt, Now: retryAt,
	}))
	got = b.getRun(t, run.RunID)
	require.Equal(t, "panic: boom again", got.TaskError, "the newest error is kept")
	require.Equal(t, 2, got.TaskAttempts)

	third := b.claimOneWorkflow(t, wfQueue, retryAt)
	require.Equal(t, 2, third.Attempts)
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: third.Token, ProcessedEventID: 1, Now: retryAt,
	}))
	got = b.getRun(t, run.RunID)
	require.Empty(t, got.TaskError, "a commit clears the error")
	require.Zero(t, got.TaskAttempts)
}

func testReleaseGivesBackClaims(t *testing.T, b *bundle) {
	// Activity tasks: run 1 schedules two, held by two workers.
	b.runWithActivities(t, "order-1", 2, 3)
	mine := b.claimActivity(t, "worker-1", 1, b.now)
	theirs := b.claimActivity(t, "worker-2", 1, b.now)
	require.Len(t, mine, 1)
	require.Len(t, theirs, 1)

	now := b.now.Add(time.Second)
	require.NoError(t, b.s.ReleaseActivityTasks(b.ctx, store.ReleaseParams{WorkerID: "worker-1", Now: now}))
	back := b.claimActivity(t, "worker-3", 10, now)
	require.Len(t, back, 1, "only worker-1's claim was given back")
	require.Equal(t, mine[0].ID, back[0].ID)
	require.Equal(t, 2, back[0].Attempt, "a new claim gets a new attempt number")
	require.Equal(t, mine[0].MaxAttempts-mine[0].Attempt, back[0].MaxAttempts-back[0].Attempt,
		"the released attempt was not spent")
	require.ErrorIs(t, b.resolve(completion(mine[0], now)), store.ErrLeaseLost,
		"the released claim is fenced once the task is claimed again")

	// Workflow tasks: runs 2 and 3, held by two workers.
	b.createRun(t, "order-2", wfQueue)
	b.createRun(t, "order-3", wfQueue)
	wmine := b.claimWorkflow(t, wfQueue, "worker-1", 1, now)
	wtheirs := b.claimWorkflow(t, wfQueue, "worker-2", 1, now)
	require.Len(t, wmine, 1)
	require.Len(t, wtheirs, 1)

	now = now.Add(time.Second)
	require.NoError(t, b.s.ReleaseWorkflowTasks(b.ctx, store.ReleaseParams{WorkerID: "worker-1", Now: now}))
	wback := b.claimWorkflow(t, wfQueue, "worker-3", 10, now)
	require.Len(t, wback, 1, "only worker-1's claim was given back")
	require.Equal(t, wmine[0].RunID, wback[0].RunID)
	require.NotEqual(t, wmine[0].Token, wback[0].Token)
	require.Zero(t, wback[0].Attempts, "a release is not a failure")
	require.ErrorIs(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: wmine[0].RunID, Token: wmine[0].Token, ProcessedEventID: 1, Now: now,
	}), store.ErrLeaseLost, "the released claim is fenced once the task is claimed again")
}

func testReleaseOneTask(t *testing.T, b *bundle) {
	b.runWithActivities(t, "order-1", 2, 3)
	mine := b.claimActivity(t, "worker-1", 2, b.now)
	require.Len(t, mine, 2)
	one, other := mine[0], mine[1]

	now := b.now.Add(time.Second)
	stale := store.ReleaseParams{WorkerID: "worker-1", Now: now, TaskID: one.ID, Attempt: one.Attempt + 1}
	require.NoError(t, b.s.ReleaseActivityTasks(b.ctx, stale))
	require.Empty(t, b.claimActivity(t, "worker-2", 10, now), "a release of another attempt gives nothing back")
	notMine := store.ReleaseParams{WorkerID: "worker-2", Now: now, TaskID: one.ID, Attempt: one.Attempt}
	require.NoError(t, b.s.ReleaseActivityTasks(b.ctx, notMine))
	require.Empty(t, b.claimActivity(t, "worker-2", 10, now), "a release by another worker gives nothing back")

	release := store.ReleaseParams{WorkerID: "worker-1", Now: now, TaskID: one.ID, Attempt: one.Attempt}
	require.NoError(t, b.s.ReleaseActivityTasks(b.ctx, release))
	back := b.claimActivity(t, "worker-2", 10, now)
	require.Len(t, back, 1, "only the named task was given back")
	require.Equal(t, one.ID, back[0].ID)
	require.Equal(t, one.MaxAttempts-one.Attempt, back[0].MaxAttempts-back[0].Attempt, "the released attempt was not spent")
	require.ErrorIs(t, b.resolve(completion(one, now)), store.ErrLeaseLost, "the released claim is fenced")
	require.NoError(t, b.resolve(completion(other, now)), "the other claim is still worker-1's")
}

func testNextDue(t *testing.T, b *bundle) {
	requireDue := func(kind, queue string, want time.Time) {
		t.Helper()
		got, ok, err := b.s.NextDue(b.ctx, kind, queue)
		require.NoError(t, err)
		if want.IsZero() {
			require.False(t, ok, "no %s task on %q, got one due %v", kind, queue, got)
			return
		}
		require.True(t, ok, "a %s task on %q", kind, queue)
		requireTime(t, want, got, kind+" due")
	}
	requireDue("workflow", wfQueue, time.Time{})
	requireDue("activity", actQueue, time.Time{})

	b.runWithActivities(t, "order-1", 1, 0)
	requireDue("workflow", wfQueue, time.Time{})
	requireDue("activity", actQueue, b.now)
	requireDue("activity", "other", time.Time{})

	a := b.claimOneActivity(t, b.now)
	requireDue("activity", actQueue, b.now.Add(actLease))
	retryAt := b.now.Add(10 * time.Second)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: a.ID, Attempt: a.Attempt, RunAfter: retryAt, Error: "timeout", Now: b.now.Add(time.Second),
	}))
	requireDue("activity", actQueue, retryAt)

	now := b.now.Add(2 * time.Second)
	b.now = now
	run := b.createRun(t, "order-2", wfQueue)
	requireDue("workflow", wfQueue, now)
	requireDue("workflow", "other", time.Time{})
	task := b.claimOneWorkflow(t, wfQueue, now)
	requireDue("workflow", wfQueue, now.Add(wfLease))
	failAt := now.Add(5 * time.Second)
	require.NoError(t, b.s.FailWorkflowTask(b.ctx, store.FailWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, Error: "boom", RunAfter: failAt, Now: now,
	}))
	requireDue("workflow", wfQueue, failAt)
}

func testConcurrentWorkflowClaimsNeverShareATask(t *testing.T, b *bundle) {
	const n = 100
	for i := range n {
		b.createRun(t, fmt.Sprintf("order-%d", i), wfQueue)
	}
	claimed := claimConcurrently(t, func(workerID string) ([]string, error) {
		tasks, err := b.s.ClaimWorkflowTasks(b.ctx, store.ClaimParams{
			Queue: wfQueue, WorkerID: workerID, Limit: 3, Now: b.now, Lease: wfLease,
		})
		ids := make([]string, len(tasks))
		for i, task := range tasks {
			ids[i] = task.RunID
		}
		return ids, err
	})
	require.Len(t, claimed, n, "every task was claimed")
	for id, times := range claimed {
		require.Equal(t, 1, times, "claims of the task of run %s", id)
	}
}

// claimConcurrently runs 8 workers that claim with claim until it returns
// nothing, and returns how many times each task ID was claimed.
func claimConcurrently(t *testing.T, claim func(workerID string) ([]string, error)) map[string]int {
	t.Helper()
	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
		wg      sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for {
				ids, err := claim(fmt.Sprintf("worker-%d", w))
				mu.Lock()
				for _, id := range ids {
					claimed[id]++
				}
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil || len(ids) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return claimed
}
