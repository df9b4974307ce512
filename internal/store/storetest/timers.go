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

// runWithTimers starts a run of workflow type typ on queue at b.now and
// commits its first workflow task, claimed by the start, which starts
// timers (events 2 onwards). The run is left with no workflow task.
func (b *bundle) runWithTimers(t *testing.T, workflowID, typ, queue string, timers ...store.NewTimer) store.Run {
	t.Helper()
	run, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: typ, Queue: queue,
		Input: json.RawMessage(`1`), Now: b.now, ClaimAs: "starter", Lease: wfLease,
	})
	require.NoError(t, err)
	events := make([]history.Attributes, len(timers))
	for i, tm := range timers {
		events[i] = history.TimerStarted{Seq: tm.Seq, FireAt: tm.FireAt}
	}
	ready, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: run.Token, ProcessedEventID: 1, Now: b.now, Events: events, Timers: timers,
	})
	require.NoError(t, err)
	require.NotNil(t, ready.TimerAt, "the scanner is told of the timers")
	return run
}

// pendingTimers is ListPendingTimers.
func (b *bundle) pendingTimers(t *testing.T, runID string) []store.PendingTimer {
	t.Helper()
	timers, err := b.s.ListPendingTimers(b.ctx, runID)
	require.NoError(t, err)
	return timers
}

// requireNextTimer fails unless NextTimer, skipping skip, is at want, or,
// with want zero, unless there is none.
func (b *bundle) requireNextTimer(t *testing.T, want time.Time, skip []string, what string) {
	t.Helper()
	at, ok, err := b.s.NextTimer(b.ctx, skip)
	require.NoError(t, err)
	if want.IsZero() {
		require.False(t, ok, "%s: no timer, got one at %v", what, at)
		return
	}
	require.True(t, ok, "%s: no timer", what)
	requireTime(t, want, at, what)
}

// fire is FireTimers at now, up to 10 timers, claiming nothing.
func (b *bundle) fire(t *testing.T, now time.Time, skip ...string) store.Fired {
	t.Helper()
	fired, tasks, err := b.s.FireTimers(b.ctx, store.FireTimersParams{Now: now, Limit: 10, Skip: skip})
	require.NoError(t, err)
	require.Empty(t, tasks, "a fire without ClaimAs claims nothing")
	return fired
}

// A timer fires once, when due and not before: its TimerFired event is
// appended and its run's workflow task made ready; the timers yet to fire
// are listed earliest first, and NextTimer names the earliest.
func testTimersFireOnceWhenDue(t *testing.T, b *bundle) {
	first, second := b.now.Add(time.Minute), b.now.Add(2*time.Minute)
	run := b.runWithTimers(t, "order-1", "Order", wfQueue,
		store.NewTimer{Seq: 2, FireAt: second}, store.NewTimer{Seq: 1, FireAt: first})

	pending := b.pendingTimers(t, run.RunID)
	require.Len(t, pending, 2)
	require.Equal(t, []int64{1, 2}, []int64{pending[0].Seq, pending[1].Seq}, "earliest first")
	requireTime(t, first, pending[0].FireAt, "timer 1's fire time")
	requireTime(t, second, pending[1].FireAt, "timer 2's fire time")
	b.requireNextTimer(t, first, nil, "NextTimer")
	none, err := b.s.ListPendingTimers(b.ctx, uuid.NewString())
	require.NoError(t, err)
	require.Empty(t, none, "an unknown run has no timers")

	require.Zero(t, b.fire(t, first.Add(-time.Microsecond)).Count, "a timer does not fire before its time")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, first.Add(-time.Microsecond)))

	at := first.Add(5 * time.Second)
	fired := b.fire(t, at)
	require.Equal(t, 1, fired.Count)
	require.Equal(t, []string{wfQueue}, fired.Queues)
	require.Len(t, fired.Timers, 1)
	require.Equal(t, run.RunID, fired.Timers[0].RunID)
	require.Equal(t, int64(1), fired.Timers[0].Seq)
	require.InDelta(t, 5*time.Second, fired.Timers[0].Lag, float64(time.Millisecond), "the lag is how late it fired")

	events := b.events(t, run.RunID)
	requireIDsInOrder(t, events)
	require.Equal(t, []string{"workflow_started", "timer_started", "timer_started", "timer_fired"}, eventTypes(events))
	require.Equal(t, history.TimerFired{Seq: 1}, events[3].Attributes)
	requireTime(t, at, events[3].Time, "time of the firing")
	require.Zero(t, b.fire(t, at).Count, "a timer fires once")
	require.Len(t, b.pendingTimers(t, run.RunID), 1, "timer 2 is left")
	b.requireNextTimer(t, second, nil, "NextTimer after the first fired")

	task := b.claimOneWorkflow(t, wfQueue, at)
	require.Equal(t, run.RunID, task.RunID)
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{RunID: run.RunID, Token: task.Token, ProcessedEventID: 4, Now: at}))

	fired = b.fire(t, second)
	require.Equal(t, 1, fired.Count)
	require.Equal(t, []string{wfQueue}, fired.Queues)
	require.Equal(t, history.TimerFired{Seq: 2}, b.events(t, run.RunID)[4].Attributes)
	require.Empty(t, b.pendingTimers(t, run.RunID))
	b.requireNextTimer(t, time.Time{}, nil, "NextTimer with every timer fired")
}

// A fire takes at most Limit timers and leaves the runs in Skip alone, as
// NextTimer does.
func testFireTimersHonoursLimitAndSkip(t *testing.T, b *bundle) {
	due := b.now.Add(time.Minute)
	runs := map[string]bool{}
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		runs[b.runWithTimers(t, id, "Order", wfQueue, store.NewTimer{Seq: 1, FireAt: due}).RunID] = true
	}

	fired, _, err := b.s.FireTimers(b.ctx, store.FireTimersParams{Now: due, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 2, fired.Count)
	require.Len(t, fired.Timers, 2)
	for _, f := range fired.Timers {
		require.True(t, runs[f.RunID], "a run of this case: %s", f.RunID)
		delete(runs, f.RunID)
	}
	require.Len(t, runs, 1)
	var left string
	for id := range runs {
		left = id
	}
	require.Len(t, b.pendingTimers(t, left), 1)

	b.requireNextTimer(t, time.Time{}, []string{left}, "NextTimer skipping the one run with a timer")
	b.requireNextTimer(t, due, nil, "NextTimer")
	require.Zero(t, b.fire(t, due, left).Count, "the run is skipped")
	require.Len(t, b.pendingTimers(t, left), 1)
	fired = b.fire(t, due)
	require.Equal(t, 1, fired.Count)
	require.Equal(t, left, fired.Timers[0].RunID)
}

// A fire with ClaimAs claims the tasks it makes for the firing worker,
// within its limit per queue and only of its types, and hands them over
// with the events it appended; the rest stay ready for anyone.
func testFireTimersClaimsForTheFiringWorker(t *testing.T, b *bundle) {
	due := b.now.Add(time.Second)
	timer := store.NewTimer{Seq: 1, FireAt: due}
	mine := map[string]bool{}
	for _, id := range []string{"mine-1", "mine-2", "mine-3"} {
		mine[b.runWithTimers(t, id, "Mine", wfQueue, timer).RunID] = true
	}
	other := b.runWithTimers(t, "other", "Other", wfQueue, timer)
	elsewhere := b.runWithTimers(t, "elsewhere", "Mine", "elsewhere", timer)

	now := due.Add(time.Millisecond)
	fired, tasks, err := b.s.FireTimers(b.ctx, store.FireTimersParams{
		Now: now, Limit: 10, ClaimAs: "w1", Lease: wfLease, Claim: map[string]int{wfQueue: 2}, Types: []string{"Mine"},
	})
	require.NoError(t, err)
	require.Equal(t, 5, fired.Count)
	require.ElementsMatch(t, []string{wfQueue, "elsewhere"}, fired.Queues, "queues with tasks left for anyone")
	require.Len(t, tasks, 2, "the claim limit of the queue")
	claimed := map[string]bool{}
	for _, wt := range tasks {
		require.True(t, mine[wt.RunID], "a run of type Mine on %s: %s", wfQueue, wt.RunID)
		claimed[wt.RunID] = true
		require.Equal(t, "Mine", wt.WorkflowType)
		require.Equal(t, wfQueue, wt.Queue)
		require.NotZero(t, wt.Token)
		requireTime(t, now.Add(wfLease), wt.LockedUntil, "LockedUntil")
		require.Equal(t, int64(1), wt.ProcessedEventID, "the first task consumed the start")
		events, err := b.s.ListEvents(b.ctx, wt.RunID, 2)
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.Len(t, wt.Events, 1, "the hand-off carries the event the fire appended")
		require.Equal(t, events[0].ID, wt.Events[0].ID, "as it reads back")
		requireTime(t, events[0].Time, wt.Events[0].Time, "time of the handed-off event")
		require.Equal(t, history.TimerFired{Seq: 1}, wt.Events[0].Attributes)
	}
	require.Empty(t, b.claimWorkflow(t, "nobody", "worker-2", 10, now), "no such queue")

	// Everything else is ready for any worker; the claimed ones are not.
	var left []string
	for _, wt := range b.claimWorkflow(t, wfQueue, "worker-2", 10, now) {
		left = append(left, wt.RunID)
	}
	require.Len(t, left, 2)
	require.Contains(t, left, other.RunID)
	for _, id := range left {
		require.False(t, claimed[id], "run %s was claimed by the fire", id)
	}
	rest := b.claimWorkflow(t, "elsewhere", "worker-2", 10, now)
	require.Len(t, rest, 1)
	require.Equal(t, elsewhere.RunID, rest[0].RunID)

	// The fire's claims are the worker's: its commits go through.
	for _, wt := range tasks {
		require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
			RunID: wt.RunID, Token: wt.Token, ProcessedEventID: 3, Now: now,
			Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`0`)}},
			Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`0`)},
		}))
		require.Equal(t, store.StatusCompleted, b.getRun(t, wt.RunID).Status)
	}
}

// A timer its workflow canceled, or whose run closed, never fires.
func testCanceledTimersAndTimersOfClosedRunsNeverFire(t *testing.T, b *bundle) {
	due := b.now.Add(time.Minute)
	run := b.runWithTimers(t, "order-1", "Order", wfQueue, store.NewTimer{Seq: 1, FireAt: due}, store.NewTimer{Seq: 2, FireAt: due})
	closed := b.runWithTimers(t, "order-2", "Order", wfQueue, store.NewTimer{Seq: 1, FireAt: due})

	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.SignalReceived{Name: "hurry", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 4, Now: b.now,
		Events: []history.Attributes{history.TimerCanceled{Seq: 1}}, CanceledTimers: []int64{1},
	}))
	_, err = b.s.TerminateRun(b.ctx, store.TerminateParams{WorkflowID: closed.WorkflowID, Reason: "stop", Now: b.now})
	require.NoError(t, err)

	pending := b.pendingTimers(t, run.RunID)
	require.Len(t, pending, 1)
	require.Equal(t, int64(2), pending[0].Seq, "timer 1 was canceled")
	require.Empty(t, b.pendingTimers(t, closed.RunID), "a closed run has no timers")

	fired := b.fire(t, due.Add(time.Hour))
	require.Equal(t, 1, fired.Count)
	require.Equal(t, run.RunID, fired.Timers[0].RunID)
	require.Equal(t, int64(2), fired.Timers[0].Seq)
	require.Equal(t, []string{"workflow_started", "timer_started", "workflow_terminated"}, eventTypes(b.events(t, closed.RunID)),
		"no firing after the close")
	b.requireNextTimer(t, time.Time{}, nil, "NextTimer")
}
