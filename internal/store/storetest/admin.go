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

// The cases of this file cover the reads that serve operators (the durable
// command, Describe, stats) and the test clock.

// ListRuns filters by status, type, workflow ID and creation time, newest
// first, up to its limit.
func testListRunsFiltersNewestFirst(t *testing.T, b *bundle) {
	t0 := b.now
	runs := map[string]store.Run{}
	for i, id := range []string{"order-1", "order-2", "mail-1"} {
		typ := "Order"
		if id == "mail-1" {
			typ = "Mail"
		}
		run, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
			RunID: uuid.NewString(), WorkflowID: id, WorkflowType: typ, Queue: id,
			Input: json.RawMessage(`1`), Now: t0.Add(time.Duration(i) * time.Minute),
		})
		require.NoError(t, err)
		runs[id] = run
	}
	closedAt := t0.Add(10 * time.Minute)
	b.closeRun(t, runs["order-1"], closedAt)

	for _, tt := range []struct {
		name string
		in   store.ListRunsParams
		want []string // workflow IDs, newest first
	}{
		{"All", store.ListRunsParams{}, []string{"mail-1", "order-2", "order-1"}},
		{"Status", store.ListRunsParams{Status: store.StatusRunning}, []string{"mail-1", "order-2"}},
		{"StatusCompleted", store.ListRunsParams{Status: store.StatusCompleted}, []string{"order-1"}},
		{"StatusNone", store.ListRunsParams{Status: store.StatusCanceled}, nil},
		{"Type", store.ListRunsParams{WorkflowType: "Order"}, []string{"order-2", "order-1"}},
		{"WorkflowID", store.ListRunsParams{WorkflowID: "order-2"}, []string{"order-2"}},
		{"TypeAndStatus", store.ListRunsParams{WorkflowType: "Order", Status: store.StatusRunning}, []string{"order-2"}},
		{"SinceInclusive", store.ListRunsParams{Since: t0.Add(time.Minute)}, []string{"mail-1", "order-2"}},
		{"SinceLater", store.ListRunsParams{Since: t0.Add(time.Hour)}, nil},
		{"Limit", store.ListRunsParams{Limit: 2}, []string{"mail-1", "order-2"}},
	} {
		got, err := b.s.ListRuns(b.ctx, tt.in)
		require.NoError(t, err, tt.name)
		var ids []string
		for _, r := range got {
			ids = append(ids, r.WorkflowID)
		}
		require.Equal(t, tt.want, ids, tt.name)
	}

	got, err := b.s.ListRuns(b.ctx, store.ListRunsParams{WorkflowType: "Order"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	open, closed := got[0], got[1]
	require.Equal(t, runs["order-1"].RunID, closed.RunID)
	require.Equal(t, "Order", closed.WorkflowType)
	require.Equal(t, "order-1", closed.Queue)
	require.Equal(t, store.StatusCompleted, closed.Status)
	requireTime(t, t0, closed.CreatedAt, "CreatedAt")
	require.NotNil(t, closed.ClosedAt)
	requireTime(t, closedAt, *closed.ClosedAt, "ClosedAt")
	require.Equal(t, runs["order-2"].RunID, open.RunID)
	require.Equal(t, store.StatusRunning, open.Status)
	require.Nil(t, open.ClosedAt)
}

// ListEventsOfRuns returns each run's whole history, as ListEvents does;
// a run it does not know is absent.
func testListEventsOfRunsReturnsWholeHistories(t *testing.T, b *bundle) {
	one := b.runWithActivities(t, "order-1", 2, 0)
	two := b.createRun(t, "order-2", wfQueue)
	unknown := uuid.NewString()

	got, err := b.s.ListEventsOfRuns(b.ctx, []string{one.RunID, two.RunID, unknown})
	require.NoError(t, err)
	require.Equal(t, map[string][]history.Event{
		one.RunID: b.events(t, one.RunID),
		two.RunID: b.events(t, two.RunID),
	}, got)

	got, err = b.s.ListEventsOfRuns(b.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// ListPendingActivities shows each unfinished activity of a run in
// schedule order: waiting for its first attempt, running (its holder and
// lease), or waiting for a retry (the last error).
func testListPendingActivitiesShowsEachAttempt(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 3, 5)
	acts := b.claimActivity(t, worker, 2, b.now)
	require.Len(t, acts, 2)
	running, retried := acts[0], acts[1]
	retryAt := b.now.Add(time.Minute)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: retried.ID, Attempt: retried.Attempt, RunAfter: retryAt, Error: "card network down", Now: b.now,
	}))
	require.NoError(t, b.s.HeartbeatActivity(b.ctx, store.HeartbeatParams{
		TaskID: running.ID, Attempt: running.Attempt, RunID: run.RunID, Seq: running.Seq,
		Details: json.RawMessage(`{"done":3}`), LockedUntil: b.now.Add(actLease),
	}))

	pending, err := b.s.ListPendingActivities(b.ctx, run.RunID)
	require.NoError(t, err)
	require.Len(t, pending, 3)
	for i, p := range pending {
		seq := int64(i + 1)
		require.Equal(t, seq, p.Seq, "schedule order")
		ev, _ := activity(run, seq, 5)
		require.NotZero(t, p.TaskID)
		require.Equal(t, ev.Activity, p.Activity)
		require.Equal(t, actQueue, p.Queue)
		require.Equal(t, 5, p.MaxAttempts)
		require.JSONEq(t, string(ev.Input), string(p.Input))
		require.JSONEq(t, string(ev.Options), string(p.Options))
		require.Zero(t, p.RateLimited)
		requireTime(t, b.now, p.ScheduledAt, "ScheduledAt")
		switch seq {
		case running.Seq:
			require.Equal(t, running.ID, p.TaskID)
			require.Equal(t, 1, p.Attempts)
			require.Equal(t, worker, p.LockedBy)
			require.NotNil(t, p.LockedUntil)
			requireTime(t, b.now.Add(actLease), *p.LockedUntil, "LockedUntil of the running attempt")
			requireTime(t, b.now.Add(actLease), p.RunAfter, "RunAfter of a running attempt is its lease's end")
			require.JSONEq(t, `{"done":3}`, string(p.Heartbeat))
			require.Empty(t, p.LastError)
		case retried.Seq:
			require.Equal(t, retried.ID, p.TaskID)
			require.Equal(t, 1, p.Attempts)
			require.Empty(t, p.LockedBy, "a retried activity is not held")
			require.Nil(t, p.LockedUntil)
			requireTime(t, retryAt, p.RunAfter, "RunAfter of a retry")
			require.Equal(t, "card network down", p.LastError)
		default:
			require.Zero(t, p.Attempts, "not tried yet")
			require.Empty(t, p.LockedBy)
			require.Nil(t, p.LockedUntil)
			requireTime(t, b.now, p.RunAfter, "RunAfter of an untried activity")
			require.Empty(t, p.LastError)
			require.Empty(t, p.Heartbeat)
		}
	}

	none, err := b.s.ListPendingActivities(b.ctx, uuid.NewString())
	require.NoError(t, err)
	require.Empty(t, none, "an unknown run has no activities")
	b.signalAndClose(t, run)
	none, err = b.s.ListPendingActivities(b.ctx, run.RunID)
	require.NoError(t, err)
	require.Empty(t, none, "a closed run has none")
}

// QueueStats counts, per queue in name order, the workflow and activity
// tasks ready, running and waiting, and the pending timers, at the time
// asked.
func testQueueStatsCountsTasksAndTimersPerQueue(t *testing.T, b *bundle) {
	t0 := b.now
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }

	stats, err := b.s.QueueStats(b.ctx, t0)
	require.NoError(t, err)
	require.Empty(t, stats, "no queue has work")

	// On "act": one activity running, one waiting to retry, one ready. On
	// "wf": a run sleeping on a timer, one whose task is claimed, one whose
	// task is ready. On "delayed": a run held until t0+10m.
	b.runWithActivities(t, "order-1", 3, 0)
	acts := b.claimActivity(t, worker, 2, t0)
	require.Len(t, acts, 2)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: acts[1].ID, Attempt: acts[1].Attempt, RunAfter: t0.Add(2 * time.Minute), Error: "boom", Now: t0,
	}))
	b.runWithTimers(t, "sleeper", "Order", wfQueue, store.NewTimer{Seq: 1, FireAt: t0.Add(time.Hour)})
	b.createRun(t, "claimed", wfQueue)
	b.claimOneWorkflow(t, wfQueue, t0)
	b.createRun(t, "ready", wfQueue)
	_, err = b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "held", WorkflowType: "Order", Queue: "delayed",
		Input: json.RawMessage(`1`), Now: t0, StartAt: t0.Add(10 * time.Minute),
	})
	require.NoError(t, err)

	for _, tt := range []struct {
		name string
		now  time.Time
		want []store.QueueStats
	}{
		{"Now", t0, []store.QueueStats{
			{Queue: actQueue, ActivityTasks: store.TaskStats{Ready: 1, Running: 1, Waiting: 1, OldestReady: at(0)}},
			{Queue: "delayed", WorkflowTasks: store.TaskStats{Waiting: 1}},
			{
				Queue: wfQueue, WorkflowTasks: store.TaskStats{Ready: 1, Running: 1, OldestReady: at(0)},
				Timers: 1, NextTimer: at(time.Hour),
			},
		}},
		// The leases have run out, the retry and the held start are due.
		{"Later", t0.Add(10 * time.Minute), []store.QueueStats{
			{Queue: actQueue, ActivityTasks: store.TaskStats{Ready: 3, OldestReady: at(0)}},
			{Queue: "delayed", WorkflowTasks: store.TaskStats{Ready: 1, OldestReady: at(10 * time.Minute)}},
			{
				Queue: wfQueue, WorkflowTasks: store.TaskStats{Ready: 2, OldestReady: at(0)},
				Timers: 1, NextTimer: at(time.Hour),
			},
		}},
	} {
		got, err := b.s.QueueStats(b.ctx, tt.now)
		require.NoError(t, err, tt.name)
		requireQueueStats(t, tt.want, got, tt.name)
	}
}

// requireQueueStats compares queue stats, times by instant.
func requireQueueStats(t *testing.T, want, got []store.QueueStats, what string) {
	t.Helper()
	require.Len(t, got, len(want), "%s: %+v", what, got)
	sameTime := func(want, got *time.Time, what string) {
		t.Helper()
		if want == nil {
			require.Nil(t, got, what)
			return
		}
		require.NotNil(t, got, what)
		requireTime(t, *want, *got, what)
	}
	for i := range want {
		w, g := want[i], got[i]
		sameTime(w.WorkflowTasks.OldestReady, g.WorkflowTasks.OldestReady, what+": "+w.Queue+" workflow tasks' oldest ready")
		sameTime(w.ActivityTasks.OldestReady, g.ActivityTasks.OldestReady, what+": "+w.Queue+" activity tasks' oldest ready")
		sameTime(w.NextTimer, g.NextTimer, what+": "+w.Queue+" next timer")
		w.WorkflowTasks.OldestReady, g.WorkflowTasks.OldestReady = nil, nil
		w.ActivityTasks.OldestReady, g.ActivityTasks.OldestReady = nil, nil
		w.NextTimer, g.NextTimer = nil, nil
		require.Equal(t, w, g, what)
	}
}

// DeadLetterStats counts the dead letters of each kind not redriven yet,
// jobs first, a kind with none included; ListPendingDeadLetterIDs names
// them, oldest first, by kind and type.
func testDeadLetterStatsCountWhatWaitsForARedrive(t *testing.T, b *bundle) {
	t0 := b.now
	stats, err := b.s.DeadLetterStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.DeadLetterStats{{Kind: store.DeadJob}, {Kind: store.DeadWorkflow}}, stats, "every kind has a row")
	ids, err := b.s.ListPendingDeadLetterIDs(b.ctx, "", "")
	require.NoError(t, err)
	require.Empty(t, ids)

	redriven := b.deadJob(t, "ship-1", `1`)
	b.now = t0.Add(time.Minute)
	job := b.deadJob(t, "ship-2", `2`)
	b.now = t0.Add(2 * time.Minute)
	run := b.deadRun(t, "order-1")
	b.now = t0.Add(3 * time.Minute)
	res, err := b.redrive(redriven.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)

	stats, err = b.s.DeadLetterStats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	require.Equal(t, store.DeadJob, stats[0].Kind)
	require.Equal(t, 1, stats[0].Pending, "the redriven job does not count")
	require.NotNil(t, stats[0].OldestPending)
	requireTime(t, t0.Add(time.Minute), *stats[0].OldestPending, "the oldest pending job")
	require.Equal(t, store.DeadWorkflow, stats[1].Kind)
	require.Equal(t, 1, stats[1].Pending)
	require.NotNil(t, stats[1].OldestPending)
	requireTime(t, t0.Add(2*time.Minute), *stats[1].OldestPending, "the oldest pending workflow")

	for _, tt := range []struct {
		kind, typ string
		want      []int64
	}{
		{"", "", []int64{job.ID, run.ID}},
		{store.DeadJob, "", []int64{job.ID}},
		{store.DeadWorkflow, "", []int64{run.ID}},
		{"", "Ship", []int64{job.ID}},
		{"", "Order", []int64{run.ID}},
		{store.DeadWorkflow, "Ship", nil},
		{"", "Mail", nil},
	} {
		ids, err := b.s.ListPendingDeadLetterIDs(b.ctx, tt.kind, tt.typ)
		require.NoError(t, err)
		if tt.want == nil {
			require.Empty(t, ids, "kind %q type %q", tt.kind, tt.typ)
			continue
		}
		require.Equal(t, tt.want, ids, "kind %q type %q", tt.kind, tt.typ)
	}
}

// ActivityStats counts how the activities of workflows ended, per type:
// from schedule to outcome, at or after Since, of the latest Limit
// outcomes. Jobs are not counted. A run redriven from a dead letter
// continues its history: what ended before the redrive counts once, and
// the activity run again counts from the redrive.
func testActivityStatsCountEachEndingOnce(t *testing.T, b *bundle) {
	t0 := b.now
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	// schedule starts a run on queue at now whose first task schedules
	// activities of the types given (seq 1, 2, ...), and claims them, by
	// type.
	schedule := func(workflowID, queue string, now time.Time, types ...string) map[string]store.ActivityTask {
		t.Helper()
		b.now = now
		run := b.createRun(t, workflowID, queue)
		task := b.claimOneWorkflow(t, queue, now)
		commit := store.CommitWorkflowTaskParams{RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: now}
		for i, typ := range types {
			ev, at := activity(run, int64(i+1), 1)
			ev.Activity, at.Activity, at.RunAfter = typ, typ, now
			commit.Events, commit.Activities = append(commit.Events, ev), append(commit.Activities, at)
		}
		require.NoError(t, b.commit(commit))
		acts := map[string]store.ActivityTask{}
		for _, a := range b.claimActivity(t, worker, 10, now) {
			acts[a.Activity] = a
		}
		require.Len(t, acts, len(types))
		return acts
	}
	complete := func(a store.ActivityTask, now time.Time) {
		t.Helper()
		require.NoError(t, b.resolve(completion(a, now)))
	}
	check := func(name string, in store.ActivityStatsParams, capped bool, since time.Time, want ...store.ActivityStats) {
		t.Helper()
		rep, err := b.s.ActivityStats(b.ctx, in)
		require.NoError(t, err, name)
		require.Equal(t, capped, rep.Capped, name)
		requireTime(t, since, rep.Since, name+": Since")
		require.Len(t, rep.Activities, len(want), "%s: %+v", name, rep.Activities)
		for i, w := range want {
			g := rep.Activities[i]
			require.Equal(t, w.Activity, g.Activity, name)
			require.Equal(t, w.Completed, g.Completed, "%s: %s completed", name, w.Activity)
			require.Equal(t, w.Failed, g.Failed, "%s: %s failed", name, w.Activity)
			for _, d := range [][2]time.Duration{{w.Mean, g.Mean}, {w.P50, g.P50}, {w.P95, g.P95}} {
				require.InDelta(t, d[0], d[1], float64(time.Millisecond), "%s: %s durations %+v", name, w.Activity, g)
			}
		}
	}
	check("Empty", store.ActivityStatsParams{Since: t0}, false, t0)

	// A job that completes is not counted.
	b.enqueueJob(t, "ship-1", `1`)
	complete(b.claimOneActivity(t, t0), sec(1))

	// Run 1 schedules A and B at t0; A completes at 2s, B fails at 3s.
	// Run 2 schedules A at 2s, which completes at 4s. Every A took 2s.
	first := schedule("stats-1", wfQueue, t0, "A", "B")
	complete(first["A"], sec(2))
	failure := history.Failure{Message: "declined", Class: "permanent", Attempts: 1}
	require.NoError(t, b.resolve(store.ResolveActivityParams{
		TaskID: first["B"].ID, Attempt: first["B"].Attempt, Now: sec(3),
		Event: history.ActivityFailed{Seq: first["B"].Seq, Failure: failure},
	}))
	second := schedule("stats-2", "other", sec(2), "A")
	complete(second["A"], sec(4))

	twoSeconds := store.ActivityStats{Activity: "A", Completed: 2, Mean: 2 * time.Second, P50: 2 * time.Second, P95: 2 * time.Second}
	failedB := store.ActivityStats{Activity: "B", Failed: 1}
	check("All", store.ActivityStatsParams{Since: t0}, false, t0, twoSeconds, failedB)
	check("SinceInclusive", store.ActivityStatsParams{Since: sec(3)}, false, sec(3),
		store.ActivityStats{Activity: "A", Completed: 1, Mean: 2 * time.Second, P50: 2 * time.Second, P95: 2 * time.Second}, failedB)
	check("SinceLater", store.ActivityStatsParams{Since: sec(5)}, false, sec(5))

	// Run 1 fails for B and is redriven at 10s; B, run again, completes at 12s.
	b.now = sec(5)
	task := b.claimOneWorkflow(t, wfQueue, sec(5))
	require.Equal(t, first["A"].RunID, task.RunID)
	wf := history.Failure{Message: "B failed"}
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: task.RunID, Token: task.Token, ProcessedEventID: b.getRun(t, task.RunID).LastEventID, Now: sec(5),
		Events: []history.Attributes{history.WorkflowFailed{Failure: wf}},
		Close:  &store.CloseRun{Status: store.StatusFailed, Failure: &wf},
	}))
	ds, err := b.s.ListDeadLetters(b.ctx, store.DeadLetterFilter{Kind: store.DeadWorkflow, Pending: true})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	b.now = sec(10)
	res, err := b.redrive(ds[0].ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	check("Redriven", store.ActivityStatsParams{Since: t0}, false, t0, twoSeconds, failedB)

	again := b.claimOneActivity(t, sec(11))
	require.Equal(t, res.RunID, again.RunID)
	complete(again, sec(12))
	check("RedrivenCompleted", store.ActivityStatsParams{Since: t0}, false, t0, twoSeconds,
		store.ActivityStats{Activity: "B", Completed: 1, Failed: 1, Mean: 2 * time.Second, P50: 2 * time.Second, P95: 2 * time.Second})

	// Capped: the latest two outcomes (A at 4s, B at 12s), since the older.
	check("Capped", store.ActivityStatsParams{Since: t0, Limit: 2}, true, sec(4),
		store.ActivityStats{Activity: "A", Completed: 1, Mean: 2 * time.Second, P50: 2 * time.Second, P95: 2 * time.Second},
		store.ActivityStats{Activity: "B", Completed: 1, Mean: 2 * time.Second, P50: 2 * time.Second, P95: 2 * time.Second})
}

// IdleUntil names, while no task runs or is ready, the earliest time a
// timer fires or a task becomes ready; while work runs or is ready, and
// when nothing is pending, it has none.
func testIdleUntilNamesTheNextDueTimeWhileNothingRuns(t *testing.T, b *bundle) {
	t0 := b.now
	idle := func(now, want time.Time, what string) {
		t.Helper()
		next, ok, err := b.s.IdleUntil(b.ctx, now)
		require.NoError(t, err)
		if want.IsZero() {
			require.False(t, ok, "%s: got %v", what, next)
			return
		}
		require.True(t, ok, what)
		requireTime(t, want, next, what)
	}
	idle(t0, time.Time{}, "nothing is pending")

	b.createRunAt(t, "held", t0.Add(10*time.Minute))
	idle(t0, t0.Add(10*time.Minute), "a held start")

	run := b.createRun(t, "sleeper", wfQueue)
	idle(t0, time.Time{}, "a workflow task is ready")
	task := b.claimOneWorkflow(t, wfQueue, t0)
	idle(t0, time.Time{}, "a workflow task runs")
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: t0,
		Events: []history.Attributes{history.TimerStarted{Seq: 1, FireAt: t0.Add(5 * time.Minute)}},
		Timers: []store.NewTimer{{Seq: 1, FireAt: t0.Add(5 * time.Minute)}},
	}))
	idle(t0, t0.Add(5*time.Minute), "the timer fires before the held start")

	b.enqueueJob(t, "ship-1", `1`)
	idle(t0, time.Time{}, "a job is ready")
	job := b.claimOneActivity(t, t0)
	idle(t0, time.Time{}, "a job runs")
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: job.ID, Attempt: job.Attempt, RunAfter: t0.Add(time.Minute), Error: "boom", Now: t0,
	}))
	idle(t0, t0.Add(time.Minute), "the job's retry comes first")
	idle(t0.Add(time.Minute), time.Time{}, "the retry is ready")
}
