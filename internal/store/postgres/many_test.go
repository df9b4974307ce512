package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// Fused steps and closes of many runs that meet in one group are done by
// one statement of each kind, and each run gets what its own statement
// would have given it: its events, its handed-off activity, its timer, its
// refusal.
func TestGroupedFusedStepsShareAStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	runs, acts := runsWithClaimedActivity(t, s, now, 6)
	a, b, c, d, e, f := 0, 1, 2, 3, 4, 5
	_, err := s.SignalRun(ctx, store.SignalParams{WorkflowID: "wf-2", Now: now}, history.SignalReceived{Name: "s"})
	require.NoError(t, err, "run c moves on: event 3 is the signal")

	fireAt := now.Add(time.Hour)
	commits := make([]store.CommitWorkflowTaskParams, 6)
	commits[a] = fusedStep(runs[a], acts[a], now,
		history.ActivityScheduled{Seq: 2, Activity: "A", Queue: "q"}, history.TimerStarted{Seq: 3, FireAt: fireAt})
	commits[a].Activities = []store.NewActivityTask{{Seq: 2, Activity: "A", Queue: "q", IdempotencyKey: runs[a] + ":2",
		Lease: time.Minute, RunAfter: now, ClaimAs: "w"}}
	commits[a].Timers = []store.NewTimer{{Seq: 3, FireAt: fireAt}}
	stale := acts[b]
	stale.Attempt++
	commits[b] = fusedStep(runs[b], stale, now)
	commits[c] = fusedStep(runs[c], acts[c], now)
	watched, err := s.WatchRun(ctx, runs[d])
	require.NoError(t, err)
	require.True(t, watched, "another engine waits for run d")
	commits[d] = fusedStep(runs[d], acts[d], now, history.WorkflowCompleted{Result: json.RawMessage(`7`)})
	commits[d].Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`7`)}
	stale = acts[e]
	stale.Attempt++
	commits[e] = fusedStep(runs[e], stale, now, history.WorkflowCompleted{Result: json.RawMessage(`8`)})
	commits[e].Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`8`)}
	commits[f] = fusedStep(runs[f], acts[f], now, history.ActivityScheduled{Seq: 2, Activity: "A", Queue: "q"})
	commits[f].Activities = []store.NewActivityTask{{Seq: 2, Activity: "A", Queue: "q", IdempotencyKey: runs[f] + ":2",
		Lease: time.Minute, RunAfter: now}}

	ready, errs, merged := together(t, s, commits, s.CommitWorkflowTask)
	require.Equal(t, 6, merged, "four steps in one statement, two closes in another")

	require.NoError(t, errs[a])
	require.EqualValues(t, 3, ready[a].FirstEventID)
	require.Len(t, ready[a].ActivityTasks, 1, "activity 2 is claimed for the writer")
	require.EqualValues(t, 2, ready[a].ActivityTasks[0].Seq)
	require.Empty(t, ready[a].ActivityQueues)
	require.NotNil(t, ready[a].TimerAt)
	require.True(t, fireAt.Equal(*ready[a].TimerAt))
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "activity_scheduled", "timer_started"},
		eventTypes(t, s, runs[a]))

	require.ErrorIs(t, errs[b], store.ErrLeaseLost)
	require.Len(t, eventTypes(t, s, runs[b]), 2, "nothing appended")
	require.ErrorIs(t, errs[c], store.ErrRunMoved)
	require.Len(t, eventTypes(t, s, runs[c]), 3, "only the signal")

	require.NoError(t, errs[d])
	require.Equal(t, runs[d], ready[d].ClosedRun)
	require.Equal(t, "*", ready[d].CloseWaiter, "the close says others wait")
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "workflow_completed"},
		eventTypes(t, s, runs[d]))
	run, err := s.GetRun(ctx, runs[d])
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, run.Status)
	require.JSONEq(t, `7`, string(run.Result))

	require.ErrorIs(t, errs[e], store.ErrLeaseLost)
	run, err = s.GetRun(ctx, runs[e])
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, run.Status)

	require.NoError(t, errs[f])
	require.EqualValues(t, 3, ready[f].FirstEventID)
	require.Equal(t, []string{"q"}, ready[f].ActivityQueues, "activity 2 of run f waits for a claim")
	require.Empty(t, ready[f].ActivityTasks)
	require.Nil(t, ready[f].TimerAt)

	claimed, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "other", Limit: 10, Now: now})
	require.NoError(t, err)
	require.Len(t, claimed, 1, "only run f's new activity is free")
	require.Equal(t, runs[f], claimed[0].RunID)
}

// Eager starts that meet in one group are one statement, and each start
// gets what it would alone: its activity handed off, its timer, and for a
// second start of one workflow ID, the first's run and ErrConflict.
func TestGroupedStartsShareAStatement(t *testing.T) {
	t.Parallel()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fireAt := now.Add(time.Hour)
	start := func(workflowID string, cmds ...history.Attributes) store.CreateRunParams {
		runID := uuid.NewString()
		first := &store.CommitWorkflowTaskParams{RunID: runID, WorkflowID: workflowID, WorkflowQueue: "q",
			ProcessedEventID: 1, Now: now, Events: cmds}
		for _, c := range cmds {
			switch c := c.(type) {
			case history.ActivityScheduled:
				first.Activities = append(first.Activities, store.NewActivityTask{Seq: c.Seq, Activity: c.Activity,
					Queue: c.Queue, IdempotencyKey: runID + ":1", Lease: time.Minute, RunAfter: now, ClaimAs: "w"})
			case history.TimerStarted:
				first.Timers = append(first.Timers, store.NewTimer{Seq: c.Seq, FireAt: c.FireAt})
			}
		}
		return store.CreateRunParams{RunID: runID, WorkflowID: workflowID, WorkflowType: "T", Queue: "q",
			Input: json.RawMessage(`1`), Now: now, First: first, Waiter: "starter-" + workflowID}
	}
	starts := []store.CreateRunParams{
		start("order-1", history.ActivityScheduled{Seq: 1, Activity: "A", Queue: "q"}),
		start("order-2", history.TimerStarted{Seq: 1, FireAt: fireAt}),
		start("order-1", history.TimerStarted{Seq: 1, FireAt: fireAt}),
	}

	runs, errs, merged := together(t, s, starts, s.CreateRun)
	require.Equal(t, 3, merged)

	// Which of the two order-1 starts came first is the group's order.
	first, second := 0, 2
	if errs[first] != nil {
		first, second = second, first
	}
	require.NoError(t, errs[first])
	require.ErrorIs(t, errs[second], store.ErrConflict)
	require.Equal(t, starts[first].RunID, runs[second].RunID, "the second start finds the first's run")
	require.Equal(t, []string{"workflow_started", starts[first].First.Events[0].EventType()},
		eventTypes(t, s, starts[first].RunID))
	require.Empty(t, eventTypes(t, s, starts[second].RunID), "nothing of the second start is stored")

	require.NoError(t, errs[1])
	require.NotNil(t, runs[1].Ready.TimerAt)
	require.True(t, fireAt.Equal(*runs[1].Ready.TimerAt))
	require.Empty(t, runs[1].Ready.ActivityTasks)
	require.Equal(t, []string{"workflow_started", "timer_started"}, eventTypes(t, s, starts[1].RunID))
	got, err := s.GetRun(t.Context(), starts[1].RunID)
	require.NoError(t, err)
	require.Equal(t, "starter-order-2", got.Waiter, "each run names its own starter")
	if first == 0 {
		require.Len(t, runs[0].Ready.ActivityTasks, 1, "activity 1 is claimed for the starter")
		require.Nil(t, runs[0].Ready.TimerAt)
	}
}

// Plain steps (workflow tasks claimed from the queue) that meet in one
// group are one statement, and each gets what it would alone: its events,
// its activity queued or handed off, its refusal, and its task made ready
// again when events arrived while it ran.
func TestGroupedStepsShareAStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		_, err := s.CreateRun(ctx, store.CreateRunParams{RunID: uuid.NewString(), WorkflowID: fmt.Sprintf("wf-%d", i),
			WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: now})
		require.NoError(t, err)
	}
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 4, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 4)
	const a, b, c, d = 0, 1, 2, 3
	_, err = s.SignalRun(ctx, store.SignalParams{WorkflowID: tasks[d].WorkflowID, Now: now}, history.SignalReceived{Name: "s"})
	require.NoError(t, err, "run d gets event 2 while its task runs")
	commits := make([]store.CommitWorkflowTaskParams, 4)
	for i, wt := range tasks {
		commits[i] = store.CommitWorkflowTaskParams{RunID: wt.RunID, Token: wt.Token, ProcessedEventID: 1, Now: now,
			Events: []history.Attributes{history.ActivityScheduled{Seq: 1, Activity: "A", Queue: "q"}},
			Activities: []store.NewActivityTask{{Seq: 1, Activity: "A", Queue: "q", IdempotencyKey: wt.RunID + ":1",
				Lease: time.Minute, RunAfter: now}}}
	}
	commits[b].Activities[0].ClaimAs = "w"
	commits[c].Token++

	ready, errs, merged := together(t, s, commits, s.CommitWorkflowTask)
	require.Equal(t, 4, merged)

	require.NoError(t, errs[a])
	require.EqualValues(t, 2, ready[a].FirstEventID)
	require.Equal(t, []string{"q"}, ready[a].ActivityQueues)
	require.Empty(t, ready[a].WorkflowQueues, "its task is done")
	require.NoError(t, errs[b])
	require.Empty(t, ready[b].ActivityQueues)
	require.Len(t, ready[b].ActivityTasks, 1, "activity 1 is claimed for the writer")
	require.ErrorIs(t, errs[c], store.ErrLeaseLost)
	require.Equal(t, []string{"workflow_started"}, eventTypes(t, s, tasks[c].RunID), "nothing appended")
	require.NoError(t, errs[d])
	require.EqualValues(t, 3, ready[d].FirstEventID, "after the signal")
	require.Equal(t, []string{"q"}, ready[d].WorkflowQueues, "the signal makes its task ready again")
	require.Equal(t, []string{"workflow_started", "signal_received", "activity_scheduled"}, eventTypes(t, s, tasks[d].RunID))

	later := now.Add(2 * time.Minute) // c's claim has run out by then
	again, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 4, Now: later, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, again, 2)
	require.ElementsMatch(t, []string{tasks[c].RunID, tasks[d].RunID}, []string{again[0].RunID, again[1].RunID},
		"a's and b's tasks are done")
}

// together runs write for each of ins at once on s, held until all are
// submitted and then committed as one group. It returns their results and
// how many of them statements for many writes did.
func together[In, Out any](t *testing.T, s *postgres.Store, ins []In, write func(context.Context, In) (Out, error)) ([]Out, []error, int) {
	t.Helper()
	commit := s.HoldGroup(t)
	outs, errs := make([]Out, len(ins)), make([]error, len(ins))
	var wg sync.WaitGroup
	for i := range ins {
		wg.Go(func() { outs[i], errs[i] = write(t.Context(), ins[i]) })
	}
	merged := commit(len(ins))
	wg.Wait()
	return outs, errs, merged
}

// runsWithClaimedActivity starts n runs (workflow IDs wf-0...) whose
// activity 1 (event 2) is claimed.
func runsWithClaimedActivity(t *testing.T, s *postgres.Store, now time.Time, n int) ([]string, []store.ActivityTask) {
	t.Helper()
	ctx := t.Context()
	runs := make([]string, n)
	for i := range runs {
		run, err := s.CreateRun(ctx, store.CreateRunParams{
			RunID: uuid.NewString(), WorkflowID: fmt.Sprintf("wf-%d", i), WorkflowType: "T", Queue: "q",
			Input: json.RawMessage(`1`), Now: now,
		})
		require.NoError(t, err)
		runs[i] = run.RunID
	}
	claim := store.ClaimParams{Queue: "q", WorkerID: "w", Limit: n, Now: now, Lease: time.Minute}
	wts, err := s.ClaimWorkflowTasks(ctx, claim)
	require.NoError(t, err)
	require.Len(t, wts, n)
	for _, wt := range wts {
		_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
			RunID: wt.RunID, Token: wt.Token, ProcessedEventID: 1, Now: now,
			Events: []history.Attributes{history.ActivityScheduled{Seq: 1, Activity: "A", Queue: "q"}},
			Activities: []store.NewActivityTask{{
				Seq: 1, Activity: "A", Queue: "q", IdempotencyKey: wt.RunID + ":1", Lease: time.Minute, RunAfter: now,
			}},
		})
		require.NoError(t, err)
	}
	claimed, err := s.ClaimActivityTasks(ctx, claim)
	require.NoError(t, err)
	require.Len(t, claimed, n)
	acts := make([]store.ActivityTask, n)
	for _, a := range claimed {
		for i, r := range runs {
			if a.RunID == r {
				acts[i] = a
			}
		}
	}
	return runs, acts
}

// fusedStep is a commit of run that records act's completion (event 3),
// then cmds.
func fusedStep(runID string, act store.ActivityTask, now time.Time, cmds ...history.Attributes) store.CommitWorkflowTaskParams {
	done := history.ActivityCompleted{Seq: act.Seq, Result: json.RawMessage(`"ok"`), Attempt: act.Attempt}
	return store.CommitWorkflowTaskParams{
		RunID: runID, WorkflowQueue: "q", ProcessedEventID: 3, Now: now,
		Events:  append([]history.Attributes{done}, cmds...),
		Outcome: &store.Outcome{TaskID: act.ID, Attempt: act.Attempt},
	}
}

func eventTypes(t *testing.T, s *postgres.Store, runID string) []string {
	t.Helper()
	events, err := s.ListEvents(t.Context(), runID, 0)
	require.NoError(t, err)
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.Type()
	}
	return types
}

// A grouped write with ClaimNext claims one task in its transaction: the
// writes that ask claim alike in one statement, the named (preferred) task
// first, then the queue's oldest; a write refused by its fence gets its
// task all the same. Outside group commit nothing is claimed.
func TestClaimNextRidesTheGroup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	s := postgres.New(pool)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	runs, acts := runsWithClaimedActivity(t, s, now, 3)

	// Ready: two jobs, the oldest tasks of the queue, and a run's activity,
	// the newest, which one write names.
	job := func(key string, at time.Time) int64 {
		id, _, err := s.EnqueueJob(ctx, store.EnqueueJobParams{Now: at, Task: store.NewActivityTask{
			Activity: "A", Queue: "q", Input: json.RawMessage(`1`), IdempotencyKey: key, Lease: time.Minute, RunAfter: at,
		}})
		require.NoError(t, err)
		return id
	}
	oldest, second := job("job-1", now.Add(-2*time.Second)), job("job-2", now.Add(-time.Second))
	named := runWithActivity(t, s, "named", now, now)

	claim := func(prefer ...store.ActivityKey) *store.ClaimParams {
		return &store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: now, Prefer: prefer}
	}
	done := json.RawMessage(`"done"`)
	closing := fusedStep(runs[0], acts[0], now, history.WorkflowCompleted{Result: done})
	closing.Close = &store.CloseRun{Status: store.StatusCompleted, Result: done}
	closing.ClaimNext = claim(store.ActivityKey{RunID: named, Seq: 1})
	stale := acts[1]
	stale.Attempt++
	refused := fusedStep(runs[1], stale, now, history.WorkflowCompleted{Result: done})
	refused.Close = &store.CloseRun{Status: store.StatusCompleted, Result: done}
	refused.ClaimNext = claim()

	ready, errs, _ := together(t, s, []store.CommitWorkflowTaskParams{closing, refused}, s.CommitWorkflowTask)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrLeaseLost)
	require.NotNil(t, ready[0].Next)
	require.NotNil(t, ready[1].Next, "the refused write's claim holds")
	var got []string
	for _, r := range ready {
		require.Equal(t, 1, r.Next.Attempt, "claimed as a claim would")
		if r.Next.RunID == named {
			got = append(got, "named")
		} else {
			got = append(got, fmt.Sprint(r.Next.ID))
		}
	}
	require.ElementsMatch(t, []string{"named", fmt.Sprint(oldest)}, got, "the named task, then the oldest")

	// Without group commit, ClaimNext is not honoured: the last job stays.
	plain := postgres.New(pool)
	alone := fusedStep(runs[2], acts[2], now, history.WorkflowCompleted{Result: done})
	alone.Close = &store.CloseRun{Status: store.StatusCompleted, Result: done}
	alone.ClaimNext = claim()
	r, err := plain.CommitWorkflowTask(ctx, alone)
	require.NoError(t, err)
	require.Nil(t, r.Next)
	left, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "x", Limit: 10, Now: now})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, second, left[0].ID)
}

// Grouped writes stamp their events as single ones do: never before the
// run's last event, whatever the writer's Now (see storetest's
// EventTimesNeverGoBack for each write alone).
func TestGroupedWritesNeverGoBackInTime(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	ahead := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	behind := ahead.Add(-10 * time.Second)
	runs, acts := runsWithClaimedActivity(t, s, ahead, 6)
	// Runs 4 and 5 get a workflow task (their activities' outcomes), whose
	// commits meet in a group below; the others are fused.
	for _, i := range []int{4, 5} {
		_, err := s.ResolveActivity(ctx, store.ResolveActivityParams{TaskID: acts[i].ID, Attempt: acts[i].Attempt, Now: behind,
			Event: history.ActivityCompleted{Seq: 1, Result: json.RawMessage(`"ok"`), Attempt: acts[i].Attempt}})
		require.NoError(t, err)
	}
	commits := make([]store.CommitWorkflowTaskParams, 4)
	for i := range 2 { // runs 0 and 1: fused steps; 2 and 3: fused closes
		commits[i] = fusedStep(runs[i], acts[i], behind, history.ActivityScheduled{Seq: 2, Activity: "A", Queue: "q"})
		commits[i].Activities = []store.NewActivityTask{{Seq: 2, Activity: "A", Queue: "q", IdempotencyKey: runs[i] + ":2",
			Lease: time.Minute, RunAfter: behind}}
		commits[2+i] = fusedStep(runs[2+i], acts[2+i], behind, history.WorkflowCompleted{Result: json.RawMessage(`7`)})
		commits[2+i].Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`7`)}
	}
	_, errs, merged := together(t, s, commits, s.CommitWorkflowTask)
	require.Equal(t, 4, merged, "two fused steps and two fused closes, each kind in a statement for many")
	for i, err := range errs {
		require.NoError(t, err, "run %d", i)
	}

	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 2, Now: ahead, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	steps := make([]store.CommitWorkflowTaskParams, len(tasks))
	for i, wt := range tasks {
		steps[i] = store.CommitWorkflowTaskParams{RunID: wt.RunID, Token: wt.Token, ProcessedEventID: 3, Now: behind,
			Events: []history.Attributes{history.ActivityScheduled{Seq: 2, Activity: "A", Queue: "q"}},
			Activities: []store.NewActivityTask{{Seq: 2, Activity: "A", Queue: "q", IdempotencyKey: wt.RunID + ":2",
				Lease: time.Minute, RunAfter: behind}}}
	}
	_, errs, merged = together(t, s, steps, s.CommitWorkflowTask)
	require.Equal(t, 2, merged, "two steps in one statement")
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])

	for _, runID := range runs {
		events, err := s.ListEvents(ctx, runID, 0)
		require.NoError(t, err)
		require.Len(t, events, 4)
		for _, ev := range events {
			require.False(t, ev.Time.Before(ahead), "run %s: event %d (%s) at %v is before the run's start at %v",
				runID, ev.ID, ev.Type(), ev.Time, ahead)
		}
	}
}
