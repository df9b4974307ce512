package postgres_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// A fire time finer than Postgres's microseconds is rounded up, never down:
// a timer does not fire before its time, not even by a nanosecond.
func TestTimerNeverFiresBeforeItsNanosecond(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "wf", WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: base,
	})
	require.NoError(t, err)
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: base, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	due := base.Add(time.Microsecond + 500*time.Nanosecond)
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: tasks[0].Token, ProcessedEventID: 1, Now: base,
		Events: []history.Attributes{history.TimerStarted{Seq: 1, FireAt: due}},
		Timers: []store.NewTimer{{Seq: 1, FireAt: due}},
	})
	require.NoError(t, err)

	// A nanosecond before the due time: the same microsecond.
	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: due.Add(-time.Nanosecond), Limit: 10})
	require.NoError(t, err)
	require.Zero(t, fired.Count, "fired before its time")
	fired, _, err = s.FireTimers(ctx, store.FireTimersParams{Now: base.Add(2 * time.Microsecond), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, fired.Count)
}

// sleepingRun creates a run of type typ on queue q whose first task started
// timer 1, due at due.
func sleepingRun(t *testing.T, s *postgres.Store, typ, q string, now, due time.Time) string {
	t.Helper()
	return runWithTimers(t, s, typ, q, now, store.NewTimer{Seq: 1, FireAt: due})
}

// runWithTimers creates a run of type typ on queue q whose first task
// started timers, in that order.
func runWithTimers(t *testing.T, s *postgres.Store, typ, q string, now time.Time, timers ...store.NewTimer) string {
	t.Helper()
	ctx := t.Context()
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: uuid.NewString(), WorkflowType: typ, Queue: q, Input: json.RawMessage(`1`), Now: now,
		ClaimAs: "starter", Lease: time.Minute,
	})
	require.NoError(t, err)
	events := make([]history.Attributes, len(timers))
	for i, tm := range timers {
		events[i] = history.TimerStarted{Seq: tm.Seq, FireAt: tm.FireAt}
	}
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: run.Token, ProcessedEventID: 1, Now: now, Events: events, Timers: timers,
	})
	require.NoError(t, err)
	return run.RunID
}

// A fire claims the tasks it makes for the firing worker, within its limit
// per queue and only of its types, and hands them over with the events it
// appended; the rest stay ready for anyone.
func TestFireTimersClaimsForTheFiringWorker(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	due := base.Add(time.Second)
	var runs []string
	for range 3 {
		runs = append(runs, sleepingRun(t, s, "Mine", "q", base, due))
	}
	other := sleepingRun(t, s, "Other", "q", base, due)
	elsewhere := sleepingRun(t, s, "Mine", "elsewhere", base, due)

	now := due.Add(time.Millisecond)
	fired, tasks, err := s.FireTimers(ctx, store.FireTimersParams{
		Now: now, Limit: 10, ClaimAs: "w1", Lease: time.Minute, Claim: map[string]int{"q": 2}, Types: []string{"Mine"},
	})
	require.NoError(t, err)
	require.Equal(t, 5, fired.Count)
	require.ElementsMatch(t, []string{"q", "elsewhere"}, fired.Queues, "queues with tasks left for anyone")
	require.Len(t, tasks, 2, "the claim limit of the queue")
	for _, wt := range tasks {
		require.Contains(t, runs, wt.RunID)
		require.Equal(t, "Mine", wt.WorkflowType)
		require.Equal(t, "q", wt.Queue)
		require.NotZero(t, wt.Token)
		require.EqualValues(t, 1, wt.ProcessedEventID, "the first task consumed the start")
		events, err := s.ListEvents(ctx, wt.RunID, 2)
		require.NoError(t, err)
		require.Len(t, wt.Events, 1)
		require.Len(t, events, 1)
		require.Equal(t, events[0].ID, wt.Events[0].ID, "the hand-off carries the events as they read back")
		require.True(t, events[0].Time.Equal(wt.Events[0].Time), "%v read back as %v", wt.Events[0].Time, events[0].Time)
		require.Equal(t, history.TimerFired{Seq: 1}, wt.Events[0].Attributes)
		require.Equal(t, events[0].Attributes, wt.Events[0].Attributes)
		// The claim is the worker's: its commit goes through.
		_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
			RunID: wt.RunID, Token: wt.Token, ProcessedEventID: 3, Now: now,
			Close: &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`0`)},
		})
		require.NoError(t, err)
	}
	// Everything else is ready for any worker.
	left, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w2", Limit: 10, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	var ids []string
	for _, wt := range left {
		ids = append(ids, wt.RunID)
	}
	require.Len(t, ids, 2)
	require.Contains(t, ids, other)
	left, err = s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "elsewhere", WorkerID: "w2", Limit: 10, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, elsewhere, left[0].RunID)
}

// A run recorded with its first task's commands (an eager start) starts
// that task's timers: no workflow task until the timer fires.
func TestFirstTaskStartsItsTimers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	due := base.Add(2 * time.Second)
	runID := uuid.NewString()
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: runID, WorkflowID: "sleeper", WorkflowType: "Sleeper", Queue: "q", Input: json.RawMessage(`1`), Now: base,
		First: &store.CommitWorkflowTaskParams{
			RunID: runID, WorkflowID: "sleeper", WorkflowQueue: "q", ProcessedEventID: 1, Now: base,
			Events: []history.Attributes{history.TimerStarted{Seq: 1, FireAt: due}},
			Timers: []store.NewTimer{{Seq: 1, FireAt: due}},
		},
	})
	require.NoError(t, err)
	require.EqualValues(t, 2, run.LastEventID)
	require.NotNil(t, run.Ready.TimerAt, "the scanner is told of the timer")
	require.True(t, due.Equal(*run.Ready.TimerAt))
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Now: due, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, tasks, "the first task ran: nothing to do before the timer")

	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: due, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, fired.Count)
	tasks, err = s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Now: due, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.EqualValues(t, 1, tasks[0].ProcessedEventID)
	events, err := s.ListEvents(ctx, runID, 0)
	require.NoError(t, err)
	var types []string
	for _, ev := range events {
		types = append(types, ev.Type())
	}
	require.Equal(t, []string{"workflow_started", "timer_started", "timer_fired"}, types)
}

// sleeper returns a store and a run of type Mine on queue q sleeping on timer
// 1 until due.
func sleeper(t *testing.T) (s *postgres.Store, runID string, due time.Time) {
	t.Helper()
	s = postgres.New(pgtest.Pool(t))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	due = base.Add(time.Second)
	return s, sleepingRun(t, s, "Mine", "q", base, due), due
}

// fusedWakeCloses is fusedWake completing the run with result.
func fusedWakeCloses(runID string, now time.Time, result string) store.CommitWorkflowTaskParams {
	commit := fusedWake(runID, now, history.WorkflowCompleted{Result: json.RawMessage(result)})
	commit.Close = &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(result)}
	return commit
}

// fusedWake is a commit that records the firing of timer 1 of a run that
// slept with nothing else new (event 3), then cmds.
func fusedWake(runID string, now time.Time, cmds ...history.Attributes) store.CommitWorkflowTaskParams {
	return store.CommitWorkflowTaskParams{
		RunID: runID, WorkflowQueue: "q", ProcessedEventID: 3, Now: now,
		Events:  append([]history.Attributes{history.TimerFired{Seq: 1}}, cmds...),
		Outcome: &store.Outcome{TimerSeq: 1},
	}
}

// A run cached where its timer comes due wakes in one statement: the
// timer goes, its TimerFired and the run's next commands (another timer
// here) are appended, and no workflow task is made.
func TestFusedWakeRecordsTheFiringAndTheCommands(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, runID, due := sleeper(t)
	due2 := due.Add(time.Second)

	commit := fusedWake(runID, due, history.TimerStarted{Seq: 2, FireAt: due2})
	commit.Timers = []store.NewTimer{{Seq: 2, FireAt: due2}}
	wrong := commit
	wrong.Outcome = &store.Outcome{TimerSeq: 9}
	_, err := s.CommitWorkflowTask(ctx, wrong)
	require.ErrorIs(t, err, store.ErrRunMoved, "the run has no timer 9")
	ready, err := s.CommitWorkflowTask(ctx, commit)
	require.NoError(t, err)
	require.EqualValues(t, 3, ready.FirstEventID)
	require.NotNil(t, ready.TimerAt)
	require.True(t, due2.Equal(*ready.TimerAt))
	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: due, Limit: 10})
	require.NoError(t, err)
	require.Zero(t, fired.Count, "timer 1 is consumed")
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Now: due, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, tasks, "a fused wake leaves no workflow task")

	// The last wake closes the run.
	fired, _, err = s.FireTimers(ctx, store.FireTimersParams{Now: due2, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, fired.Count, "timer 2 is pending")
	events, err := s.ListEvents(ctx, runID, 0)
	require.NoError(t, err)
	var types []string
	for _, ev := range events {
		types = append(types, ev.Type())
	}
	require.Equal(t, []string{"workflow_started", "timer_started", "timer_fired", "timer_started", "timer_fired"}, types)
}

// A timer a scanner fired first moved the run: the fused wake changes
// nothing and says so, and the run wakes from its workflow task.
func TestFusedWakeRefusedWhenTheTimerFiredElsewhere(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, runID, due := sleeper(t)
	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: due, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, fired.Count)

	_, err = s.CommitWorkflowTask(ctx, fusedWakeCloses(runID, due, `0`))
	require.ErrorIs(t, err, store.ErrRunMoved)
	run, err := s.GetRun(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, run.Status)
	require.EqualValues(t, 3, run.LastEventID, "only the scanner's TimerFired")
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Now: due, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 1, "the fire's workflow task is there to run")
}

// A fused wake that completes the run closes it and removes its timers.
func TestFusedWakeCompletesTheRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, runID, due := sleeper(t)

	ready, err := s.CommitWorkflowTask(ctx, fusedWakeCloses(runID, due, `7`))
	require.NoError(t, err)
	require.Equal(t, runID, ready.ClosedRun)
	run, err := s.GetRun(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, run.Status)
	require.JSONEq(t, `7`, string(run.Result))
	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: due.Add(time.Hour), Limit: 10})
	require.NoError(t, err)
	require.Zero(t, fired.Count, "no timer left")
}

// A fire of two timers of one run hands the task over with both
// TimerFired events, numbered as they read back.
func TestFireTimersHandsOverEveryFiringOfTheRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	due := base.Add(time.Second)
	runID := runWithTimers(t, s, "Mine", "q", base, store.NewTimer{Seq: 2, FireAt: due}, store.NewTimer{Seq: 1, FireAt: due})

	_, tasks, err := s.FireTimers(ctx, store.FireTimersParams{
		Now: due, Limit: 10, ClaimAs: "w1", Lease: time.Minute, Claim: map[string]int{"q": 1}, Types: []string{"Mine"},
	})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	events, err := s.ListEvents(ctx, runID, 3)
	require.NoError(t, err)
	require.Len(t, tasks[0].Events, 2)
	require.Len(t, events, 2)
	for i, ev := range events {
		require.Equal(t, ev.ID, tasks[0].Events[i].ID)
		require.Equal(t, ev.Attributes, tasks[0].Events[i].Attributes)
	}
}

// Fused wakes of many runs that meet in one group are one statement for
// the steps and one for the closes, and each run gets what its own
// statement would have given it.
func TestGroupedFusedWakesShareAStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	due := base.Add(time.Second)
	due2 := due.Add(time.Second)
	runs := make([]string, 4)
	for i := range runs {
		runs[i] = sleepingRun(t, s, "Mine", "q", base, due)
	}
	const a, b, c, d = 0, 1, 2, 3
	commits := []store.CommitWorkflowTaskParams{
		a: fusedWake(runs[a], due, history.TimerStarted{Seq: 2, FireAt: due2}),
		b: fusedWakeCloses(runs[b], due, `1`),
		c: fusedWake(runs[c], due),
		d: fusedWakeCloses(runs[d], due, `2`),
	}
	commits[a].Timers = []store.NewTimer{{Seq: 2, FireAt: due2}}
	commits[c].Outcome = &store.Outcome{TimerSeq: 9}
	commits[d].Outcome = &store.Outcome{TimerSeq: 9}

	ready, errs, merged := together(t, s, commits, s.CommitWorkflowTask)
	require.Equal(t, 4, merged, "two steps in one statement, two closes in another")

	require.NoError(t, errs[a])
	require.EqualValues(t, 3, ready[a].FirstEventID)
	require.NotNil(t, ready[a].TimerAt)
	require.True(t, due2.Equal(*ready[a].TimerAt))
	require.Equal(t, []string{"workflow_started", "timer_started", "timer_fired", "timer_started"}, eventTypes(t, s, runs[a]))
	require.NoError(t, errs[b])
	require.Equal(t, runs[b], ready[b].ClosedRun)
	run, err := s.GetRun(ctx, runs[b])
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, run.Status)
	require.JSONEq(t, `1`, string(run.Result))
	for _, i := range []int{c, d} {
		require.ErrorIs(t, errs[i], store.ErrRunMoved, "run %d has no timer 9", i)
		require.Len(t, eventTypes(t, s, runs[i]), 2, "nothing appended")
	}

	// Timer 1 of a and b went with their wakes; c's and d's are still due.
	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: due, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 2, fired.Count)
}
