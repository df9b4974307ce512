package storetest

import (
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

func testActivityClaimRaisesAttempt(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 5)

	first := b.claimOneActivity(t, b.now)
	require.Equal(t, run.RunID, first.RunID)
	require.Equal(t, 1, first.Attempt)
	require.Equal(t, 5, first.MaxAttempts)
	requireTime(t, b.now.Add(actLease), first.LockedUntil, "LockedUntil")

	require.Empty(t, b.claimActivity(t, "worker-2", 10, b.now.Add(actLease-time.Second)), "the lease holds")
	later := b.now.Add(actLease + time.Second)
	second := b.claimActivity(t, "worker-2", 10, later)
	require.Len(t, second, 1, "the lease ran out")
	require.Equal(t, first.ID, second[0].ID)
	require.Equal(t, 2, second[0].Attempt)
	require.Equal(t, 5, second[0].MaxAttempts, "claims do not touch the budget")
	requireTime(t, later.Add(actLease), second[0].LockedUntil, "LockedUntil")

	require.Equal(t, int64(2), b.getRun(t, run.RunID).LastEventID, "claims append no events")
}

func testResolveActivityAppendsEventAndReadiesWorkflowTask(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 2, 0)
	acts := b.claimActivity(t, worker, 10, b.now)
	require.Len(t, acts, 2)
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now), "no workflow task before a completion")

	now := b.now.Add(time.Second)
	ready, err := b.s.ResolveActivity(b.ctx, completion(acts[0], now))
	require.NoError(t, err)
	require.Equal(t, store.Ready{WorkflowQueues: []string{wfQueue}}, ready)
	events := b.events(t, run.RunID)
	require.Len(t, events, 4)
	require.Equal(t, int64(4), events[3].ID)
	requireTime(t, now, events[3].Time, "time of the completion")
	done, ok := events[3].Attributes.(history.ActivityCompleted)
	require.True(t, ok, "event 4 is %T, want ActivityCompleted", events[3].Attributes)
	require.Equal(t, acts[0].Seq, done.Seq)
	require.Equal(t, 1, done.Attempt)
	require.JSONEq(t, `"ok"`, string(done.Result))
	got := b.getRun(t, run.RunID)
	require.Equal(t, int64(4), got.LastEventID)
	requireTime(t, now, got.UpdatedAt, "UpdatedAt")

	failure := history.Failure{Message: "card declined", Class: "permanent", Attempts: 1}
	require.NoError(t, b.resolve(store.ResolveActivityParams{
		TaskID: acts[1].ID, Attempt: acts[1].Attempt, Now: now,
		Event: history.ActivityFailed{Seq: acts[1].Seq, Failure: failure},
	}), "a failure resolves the activity too")
	events = b.events(t, run.RunID)
	require.Equal(t, []string{
		"workflow_started", "activity_scheduled", "activity_scheduled", "activity_completed", "activity_failed",
	}, eventTypes(events))
	require.Equal(t, history.ActivityFailed{Seq: acts[1].Seq, Failure: failure}, events[4].Attributes)

	task := b.claimOneWorkflow(t, wfQueue, now)
	require.Equal(t, run.RunID, task.RunID, "two completions make one workflow task")
	require.Equal(t, int64(1), task.ProcessedEventID)
	require.Empty(t, b.claimActivity(t, worker, 10, now.Add(time.Hour)), "resolved tasks are gone")
}

// testCloseDropsPendingActivities closes a run while one of its activities
// runs and another waits: the waiting one is never handed out, and the
// running one's late completion is refused and appends nothing.
func testCloseDropsPendingActivities(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 3, 0)
	acts := b.claimActivity(t, worker, 2, b.now)
	require.Len(t, acts, 2)
	require.NoError(t, b.resolve(completion(acts[0], b.now)))
	b.closeRun(t, run, b.now)
	events := b.events(t, run.RunID)

	require.Empty(t, b.claimActivity(t, worker, 10, b.now.Add(time.Hour)),
		"the closed run's waiting activity is not handed out, nor its running one again")
	err := b.resolve(completion(acts[1], b.now.Add(time.Second)))
	if !errors.Is(err, store.ErrRunClosed) {
		require.ErrorIs(t, err, store.ErrLeaseLost, "a completion for a closed run is refused")
	}
	require.Equal(t, events, b.events(t, run.RunID), "a closed run's history does not grow")
	got := b.getRun(t, run.RunID)
	require.Equal(t, store.StatusCompleted, got.Status)
	require.Equal(t, int64(len(events)), got.LastEventID)
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now.Add(time.Hour)), "a closed run gets no workflow task")
}

func testDuplicateCompletionIsIgnored(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	a := b.claimOneActivity(t, b.now)

	require.NoError(t, b.resolve(completion(a, b.now)))
	require.ErrorIs(t, b.resolve(completion(a, b.now.Add(time.Second))), store.ErrLeaseLost)
	require.ErrorIs(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: a.ID, Attempt: a.Attempt, RunAfter: b.now, Error: "late", Now: b.now,
	}), store.ErrLeaseLost, "a resolved task cannot be retried")

	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed"}, eventTypes(b.events(t, run.RunID)))
	require.Equal(t, int64(3), b.getRun(t, run.RunID).LastEventID)
	require.Len(t, b.claimWorkflow(t, wfQueue, worker, 10, b.now.Add(time.Second)), 1)
	require.Empty(t, b.claimActivity(t, worker, 10, b.now.Add(time.Hour)), "the retry did not bring the task back")
}

func testStaleAttemptCompletionIsRejected(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	first := b.claimOneActivity(t, b.now)
	later := b.now.Add(actLease + time.Second)
	second := b.claimOneActivity(t, later)
	require.Equal(t, first.ID, second.ID)

	require.ErrorIs(t, b.resolve(completion(first, later)), store.ErrLeaseLost)
	require.ErrorIs(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: first.ID, Attempt: first.Attempt, RunAfter: later, Error: "stale", Now: later,
	}), store.ErrLeaseLost)
	require.Equal(t, []string{"workflow_started", "activity_scheduled"}, eventTypes(b.events(t, run.RunID)),
		"the stale attempt appended nothing")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, later), "the stale attempt readied no workflow task")
	require.Empty(t, b.claimActivity(t, worker, 10, later), "the stale retry did not release the current claim")

	require.NoError(t, b.resolve(completion(second, later)), "the current attempt still resolves")
	events := b.events(t, run.RunID)
	require.Len(t, events, 3)
	done, ok := events[2].Attributes.(history.ActivityCompleted)
	require.True(t, ok)
	require.Equal(t, 2, done.Attempt)
}

func testRetryActivityDelaysTask(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 5)
	first := b.claimOneActivity(t, b.now)

	retryAt := b.now.Add(time.Minute)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: first.ID, Attempt: first.Attempt, RunAfter: retryAt, Error: "connection reset", Now: b.now.Add(time.Second),
	}))
	require.Empty(t, b.claimActivity(t, worker, 10, retryAt.Add(-time.Microsecond)), "the task waits for RunAfter")

	second := b.claimOneActivity(t, retryAt)
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, 2, second.Attempt)
	require.Equal(t, 5, second.MaxAttempts)
	require.Zero(t, second.RateLimited)
	require.Equal(t, "connection reset", second.LastError)
	requireTime(t, retryAt.Add(actLease), second.LockedUntil, "LockedUntil")

	require.Equal(t, []string{"workflow_started", "activity_scheduled"}, eventTypes(b.events(t, run.RunID)),
		"a retry appends nothing")
	require.Empty(t, b.claimWorkflow(t, wfQueue, worker, 10, retryAt), "a retry readies no workflow task")
}

func testRateLimitedRetryRefundsAttempt(t *testing.T, b *bundle) {
	b.runWithActivities(t, "order-1", 1, 3)
	b.runWithActivities(t, "order-2", 1, 0)

	// claim claims both tasks, keyed by workflow ID.
	claim := func(now time.Time) map[string]store.ActivityTask {
		t.Helper()
		byRun := map[string]store.ActivityTask{}
		for _, a := range b.claimActivity(t, worker, 10, now) {
			byRun[a.WorkflowID] = a
		}
		require.Len(t, byRun, 2)
		return byRun
	}
	retry := func(a store.ActivityTask, now time.Time, rateLimited bool) {
		t.Helper()
		require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
			TaskID: a.ID, Attempt: a.Attempt, RunAfter: now, Error: "429 after " + strconv.Itoa(a.Attempt),
			RateLimited: rateLimited, Now: now,
		}))
	}

	now := b.now
	got := claim(now)
	require.Equal(t, 3, got["order-1"].MaxAttempts)
	for _, a := range got {
		retry(a, now.Add(time.Second), true)
	}
	now = now.Add(time.Second)
	got = claim(now)
	require.Equal(t, 2, got["order-1"].Attempt)
	require.Equal(t, 4, got["order-1"].MaxAttempts, "a rate-limited retry gives its attempt back")
	require.Equal(t, 1, got["order-1"].RateLimited)
	require.Zero(t, got["order-2"].MaxAttempts, "an unlimited budget stays unlimited")
	require.Equal(t, 1, got["order-2"].RateLimited)

	for _, a := range got {
		retry(a, now.Add(time.Second), false)
	}
	now = now.Add(time.Second)
	got = claim(now)
	require.Equal(t, 3, got["order-1"].Attempt)
	require.Equal(t, 4, got["order-1"].MaxAttempts, "an ordinary retry spends its attempt")
	require.Equal(t, 1, got["order-1"].RateLimited, "an ordinary retry is not counted as rate-limited")
	require.Zero(t, got["order-2"].MaxAttempts)
	require.Equal(t, 1, got["order-2"].RateLimited)
}

func testConcurrentClaimsNeverShareATask(t *testing.T, b *bundle) {
	const n = 200
	b.runWithActivities(t, "order-1", n, 0)
	claimed := claimConcurrently(t, func(workerID string) ([]string, error) {
		tasks, err := b.s.ClaimActivityTasks(b.ctx, store.ClaimParams{
			Queue: actQueue, WorkerID: workerID, Limit: 3, Now: b.now,
		})
		ids := make([]string, len(tasks))
		for i, a := range tasks {
			ids[i] = strconv.FormatInt(a.ID, 10)
			if a.Attempt != 1 {
				ids[i] += " at attempt " + strconv.Itoa(a.Attempt)
			}
		}
		return ids, err
	})
	require.Len(t, claimed, n, "every task was claimed, each at attempt 1")
	for id, times := range claimed {
		require.Equal(t, 1, times, "claims of activity task %s", id)
	}
}

// testConcurrentDuplicateCompletionsCommitOnce resolves every task twice at
// once: exactly one of each pair is recorded, alone or in a group commit.
func testConcurrentDuplicateCompletionsCommitOnce(t *testing.T, b *bundle) {
	const n = 40
	run := b.runWithActivities(t, "order-1", n, 0)
	tasks := b.claimActivity(t, worker, n, b.now)
	require.Len(t, tasks, n)
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		ok, lost   int
		unexpected []error
	)
	for range 2 {
		for _, task := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := completion(task, b.now)
				in.RunID = run.RunID
				err := b.resolve(in)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, store.ErrLeaseLost):
					lost++
				default:
					unexpected = append(unexpected, err)
				}
			}()
		}
	}
	wg.Wait()
	require.Empty(t, unexpected)
	require.Equal(t, n, ok, "one completion per task")
	require.Equal(t, n, lost, "the duplicate of each is refused")
	completed := 0
	for _, e := range b.events(t, run.RunID) {
		if e.Type() == "activity_completed" {
			completed++
		}
	}
	require.Equal(t, n, completed)
}

// testHandOffClaimsTheNextTasks: a commit with ClaimAs claims its activities
// at attempt 1, and a completion with ClaimAs claims the run's next workflow
// task; neither is claimable by anyone else, and the hand-off's fences hold.
func testHandOffClaimsTheNextTasks(t *testing.T, b *bundle) {
	run := b.createRun(t, "order-1", wfQueue)
	wt := b.claimOneWorkflow(t, wfQueue, b.now)
	ev, at := activity(run, 1, 3)
	at.RunAfter, at.ClaimAs = b.now, worker
	ready, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, WorkflowID: run.WorkflowID, WorkflowQueue: wfQueue, Token: wt.Token, ProcessedEventID: 1,
		// Postgres keeps microseconds: the nanoseconds are not in the lease.
		Events: []history.Attributes{ev}, Activities: []store.NewActivityTask{at}, Now: b.now.Add(789 * time.Nanosecond),
	})
	require.NoError(t, err)
	require.Len(t, ready.ActivityTasks, 1)
	act := ready.ActivityTasks[0]
	require.Equal(t, 1, act.Attempt)
	requireTime(t, b.now.Add(at.Lease), act.LockedUntil, "LockedUntil")
	require.Equal(t, run.RunID, act.RunID)
	require.Equal(t, wfQueue, act.WorkflowQueue)
	require.Empty(t, ready.ActivityQueues, "a handed-off activity is not announced")
	require.Empty(t, b.claimActivity(t, "worker-2", 10, b.now), "the handed-off activity is claimed")

	res, err := b.s.ResolveActivity(b.ctx, store.ResolveActivityParams{
		RunID: run.RunID, TaskID: act.ID, Attempt: act.Attempt, Now: b.now, ClaimAs: worker, Lease: wfLease,
		Event: history.ActivityCompleted{Seq: 1, Result: json.RawMessage(`"ok"`), Attempt: 1},
	})
	require.NoError(t, err)
	require.Len(t, res.WorkflowTasks, 1)
	next := res.WorkflowTasks[0]
	require.Equal(t, run.RunID, next.RunID)
	require.Equal(t, wfQueue, next.Queue)
	require.Equal(t, "order-1", next.WorkflowID)
	require.Equal(t, int64(1), next.ProcessedEventID, "what the last committed task consumed")
	require.NotEqual(t, wt.Token, next.Token, "a new claim has a new token")
	require.Len(t, next.Events, 1, "the hand-off carries the event it appended")
	require.Equal(t, int64(3), next.Events[0].ID)
	require.Equal(t, "activity_completed", next.Events[0].Type())
	require.Empty(t, b.claimWorkflow(t, wfQueue, "worker-2", 10, b.now), "the handed-off task is claimed")

	// The old claim's token cannot commit on the new task row.
	_, err = b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: wt.Token, ProcessedEventID: 3, Now: b.now,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`1`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`1`)},
	})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	_, err = b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: next.Token, ProcessedEventID: 3, Now: b.now,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`1`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`1`)},
	})
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, b.getRun(t, run.RunID).Status)
}

// testClaimOnlyTheTypesAsked: a worker claims only the workflow and activity
// types it has; the others stay ready for a worker that has them.
func testClaimOnlyTheTypesAsked(t *testing.T, b *bundle) {
	b.runWithActivities(t, "order-1", 1, 0)
	acts, err := b.s.ClaimActivityTasks(b.ctx, store.ClaimParams{Queue: actQueue, WorkerID: worker, Limit: 10, Now: b.now, Types: []string{"Refund"}})
	require.NoError(t, err)
	require.Empty(t, acts, "no Charge for a worker that has only Refund")
	acts, err = b.s.ClaimActivityTasks(b.ctx, store.ClaimParams{Queue: actQueue, WorkerID: worker, Limit: 10, Now: b.now, Types: []string{"Charge"}})
	require.NoError(t, err)
	require.Len(t, acts, 1)

	b.createRun(t, "order-2", wfQueue)
	wfs, err := b.s.ClaimWorkflowTasks(b.ctx, store.ClaimParams{Queue: wfQueue, WorkerID: worker, Limit: 10, Now: b.now, Lease: wfLease, Types: []string{"Other"}})
	require.NoError(t, err)
	require.Empty(t, wfs)
	wfs, err = b.s.ClaimWorkflowTasks(b.ctx, store.ClaimParams{Queue: wfQueue, WorkerID: worker, Limit: 10, Now: b.now, Lease: wfLease, Types: []string{"Other", b.getRun(t, wfsRunID(t, b, "order-2")).WorkflowType}})
	require.NoError(t, err)
	require.Len(t, wfs, 1)
}

func wfsRunID(t *testing.T, b *bundle, workflowID string) string {
	t.Helper()
	r, err := b.s.GetRunByWorkflowID(b.ctx, workflowID)
	require.NoError(t, err)
	return r.RunID
}

// testHeartbeatOfAnActivityItsRunGaveUpOn checks that a heartbeat tells a
// claim that lost to another attempt (ErrLeaseLost) from an activity its
// run no longer wants (ErrActivityCanceled): the run closed without its
// outcome, or recorded its cancellation.
func testHeartbeatOfAnActivityItsRunGaveUpOn(t *testing.T, b *bundle) {
	beat := func(a store.ActivityTask) error {
		return b.s.HeartbeatActivity(b.ctx, store.HeartbeatParams{
			TaskID: a.ID, Attempt: a.Attempt, RunID: a.RunID, Seq: a.Seq, LockedUntil: b.now.Add(time.Minute),
		})
	}
	run := b.runWithActivities(t, "order-1", 3, 0)
	acts := b.claimActivity(t, worker, 3, b.now)
	require.Len(t, acts, 3)
	require.NoError(t, beat(acts[0]), "a held claim is extended")

	require.NoError(t, b.resolve(completion(acts[0], b.now)))
	require.ErrorIs(t, beat(acts[0]), store.ErrLeaseLost, "the activity has its outcome: the claim is simply gone")

	task := b.claimOneWorkflow(t, wfQueue, b.now)
	last := b.getRun(t, run.RunID).LastEventID
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: last, Now: b.now,
		Events:             []history.Attributes{history.ActivityCanceled{Seq: acts[1].Seq}},
		CanceledActivities: []int64{acts[1].Seq},
	}))
	require.ErrorIs(t, beat(acts[1]), store.ErrActivityCanceled, "the run canceled the activity")

	b.signalAndClose(t, run)
	require.ErrorIs(t, beat(acts[2]), store.ErrActivityCanceled, "the run closed without its outcome")
}

// signalAndClose makes run's workflow task ready with a signal, then closes
// the run.
func (b *bundle) signalAndClose(t *testing.T, run store.Run) {
	t.Helper()
	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.SignalReceived{Name: "stop", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	b.closeRun(t, run, b.now)
}

// testWaitCanceledActivity checks a cancel the workflow waits for: an
// activity with a live claim keeps its task, whose heartbeats and retries
// are refused as canceled and whose outcome is recorded; one no attempt
// runs is removed, its failure (class "canceled") appended at once.
func testWaitCanceledActivity(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 2, 0)
	acts := b.claimActivity(t, worker, 1, b.now)
	require.Len(t, acts, 1)
	running := acts[0]
	unclaimed := int64(3 - running.Seq) // seqs 1 and 2

	_, err := b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: run.WorkflowID, Now: b.now},
		history.WorkflowCancelRequested{Reason: "stop"})
	require.NoError(t, err)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	last := b.getRun(t, run.RunID).LastEventID
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: last, Now: b.now,
		Events: []history.Attributes{
			history.ActivityCanceled{Seq: 1, Wait: true}, history.ActivityCanceled{Seq: 2, Wait: true},
		},
		WaitCanceledActivities: []int64{1, 2},
	}))
	events := b.events(t, run.RunID)
	lastEv := events[len(events)-1]
	failed, ok := lastEv.Attributes.(history.ActivityFailed)
	require.True(t, ok, "the activity no attempt ran fails at once: %s", lastEv.Type())
	require.Equal(t, unclaimed, failed.Seq)
	require.Equal(t, "canceled", failed.Failure.Class)

	require.ErrorIs(t, b.s.HeartbeatActivity(b.ctx, store.HeartbeatParams{
		TaskID: running.ID, Attempt: running.Attempt, RunID: running.RunID, Seq: running.Seq, LockedUntil: b.now.Add(time.Minute),
	}), store.ErrActivityCanceled, "the running attempt learns of the cancel")
	require.ErrorIs(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: running.ID, Attempt: running.Attempt, RunAfter: b.now, Error: "stopped", Now: b.now,
	}), store.ErrActivityCanceled, "it is not retried")
	require.NoError(t, b.resolve(completion(running, b.now)), "its outcome is recorded")
	events = b.events(t, run.RunID)
	require.Equal(t, "activity_completed", events[len(events)-1].Type())
}
