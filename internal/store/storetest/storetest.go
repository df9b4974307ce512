// Package storetest is the conformance suite every store.Store must pass.
//
// A backend's test calls Run with a function that returns a fresh, empty
// store; Run starts one parallel subtest per behaviour the Store interface
// promises, each on a store of its own. A change to store semantics starts
// here, as a failing case.
//
// # Time
//
// A store never reads the wall clock: every time arrives as a parameter. The
// cases use a fixed instant, whole microseconds in UTC (what PostgreSQL keeps),
// and move it forward to let leases run out, so nothing sleeps.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// Run runs the conformance suite. newStore returns a fresh store with no runs
// or tasks; it is called once per case and may register cleanups on t.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t, &bundle{ctx: t.Context(), s: newStore(t), now: epoch})
		})
	}
}

// cases are the behaviours, named for what the store guarantees.
var cases = []struct {
	name string
	test func(t *testing.T, b *bundle)
}{
	// runs.go
	{"CreateRunAppendsStartedEventAndReadyTask", testCreateRunAppendsStartedEventAndReadyTask},
	{"CreateRunSameWorkflowIDReturnsOpenRunAndErrConflict", testCreateRunSameWorkflowIDReturnsOpenRunAndErrConflict},
	{"CreateRunAfterCloseStartsNewRun", testCreateRunAfterCloseStartsNewRun},
	{"GetRunNotFound", testGetRunNotFound},
	{"GetRunByWorkflowIDReturnsNewest", testGetRunByWorkflowIDReturnsNewest},
	{"GetRunByWorkflowIDPrefersTheContinuation", testGetRunByWorkflowIDPrefersTheContinuation},
	{"ListEventsAfterID", testListEventsAfterID},
	{"CreateRunClaimAsHandsOffFirstTask", testCreateRunClaimAsHandsOffFirstTask},
	{"CreateRunWithFirstTaskRecordsItsCommands", testCreateRunWithFirstTaskRecordsItsCommands},
	{"RunWaiterSaysWhoWaitsForTheClose", testRunWaiterSaysWhoWaitsForTheClose},
	{"NotRunningNamesClosedAndUnknownRuns", testNotRunningNamesClosedAndUnknownRuns},

	// intx.go
	{"InTxCommitsAllOrNothing", testInTxCommitsAllOrNothing},

	// eventtimes.go
	{"EventTimesNeverGoBack", testEventTimesNeverGoBack},

	// workflowtasks.go
	{"ClaimSkipsLockedTask", testClaimSkipsLockedTask},
	{"ClaimRespectsLimitAndQueue", testClaimRespectsLimitAndQueue},
	{"ClaimReturnsAFirstTasksHistory", testClaimReturnsAFirstTasksHistory},
	{"ExpiredLeaseIsClaimedAgainWithNewToken", testExpiredLeaseIsClaimedAgainWithNewToken},
	{"CommitRejectsStaleToken", testCommitRejectsStaleToken},
	{"CommitAppendsEventsCreatesActivitiesAndDeletesTask", testCommitAppendsEventsCreatesActivitiesAndDeletesTask},
	{"CommitWithCloseClosesRun", testCommitWithCloseClosesRun},
	{"CommitKeepsTaskReadyWhenEventsArrivedMeanwhile", testCommitKeepsTaskReadyWhenEventsArrivedMeanwhile},
	{"CommitWithNextEventIDRequiresTheHistoryItSaw", testCommitWithNextEventIDRequiresTheHistoryItSaw},
	{"SecondCommitWithSameTokenIsRejected", testSecondCommitWithSameTokenIsRejected},
	{"CommitRacingCompletionLeavesTaskReady", testCommitRacingCompletionLeavesTaskReady},
	{"FailWorkflowTaskKeepsErrorAndDelays", testFailWorkflowTaskKeepsErrorAndDelays},
	{"ReleaseGivesBackClaims", testReleaseGivesBackClaims},
	{"ReleaseOneTaskIsFencedByItsAttempt", testReleaseOneTask},
	{"NextDue", testNextDue},
	{"ConcurrentWorkflowClaimsNeverShareATask", testConcurrentWorkflowClaimsNeverShareATask},

	// activities.go
	{"ActivityClaimRaisesAttempt", testActivityClaimRaisesAttempt},
	{"ResolveActivityAppendsEventAndReadiesWorkflowTask", testResolveActivityAppendsEventAndReadiesWorkflowTask},
	{"CloseDropsPendingActivities", testCloseDropsPendingActivities},
	{"HeartbeatOfAnActivityItsRunGaveUpOn", testHeartbeatOfAnActivityItsRunGaveUpOn},
	{"WaitCanceledActivity", testWaitCanceledActivity},
	{"DuplicateCompletionIsIgnored", testDuplicateCompletionIsIgnored},
	{"StaleAttemptCompletionIsRejected", testStaleAttemptCompletionIsRejected},
	{"RetryActivityDelaysTask", testRetryActivityDelaysTask},
	{"RateLimitedRetryRefundsAttempt", testRateLimitedRetryRefundsAttempt},
	{"ConcurrentClaimsNeverShareATask", testConcurrentClaimsNeverShareATask},
	{"ConcurrentDuplicateCompletionsCommitOnce", testConcurrentDuplicateCompletionsCommitOnce},
	{"HandOffClaimsTheNextTasks", testHandOffClaimsTheNextTasks},
	{"ClaimOnlyTheTypesAsked", testClaimOnlyTheTypesAsked},

	// activitytimeouts.go
	{"UnstartedActivitiesArePastTheirScheduleToStart", testUnstartedActivitiesArePastTheirScheduleToStart},

	// fused.go
	{"FusedStepRecordsOutcomeAndCommands", testFusedStepRecordsOutcomeAndCommands},
	{"ReadyQueuesAreNamedOnce", testReadyQueuesAreNamedOnce},
	{"FusedStepRefusesAStaleAttempt", testFusedStepRefusesAStaleAttempt},
	{"FusedStepRefusedWhenRunMovedOn", testFusedStepRefusedWhenRunMovedOn},
	{"FusedCloseCompletesRun", testFusedCloseCompletesRun},
	{"FusedCloseRefusedWhileOtherActivitiesPend", testFusedCloseRefusedWhileOtherActivitiesPend},
	{"FusedCommitRejectsOtherShapes", testFusedCommitRejectsOtherShapes},
	{"FusedStepStartsTimers", testFusedStepStartsTimers},

	// deadletters.go
	{"RedriveJobHeldByPendingJobIsRefused", testRedriveJobHeldByPendingJobIsRefused},
	{"RedriveWorkflowHeldByOpenRunIsRefused", testRedriveWorkflowHeldByOpenRunIsRefused},
	{"ListDeadLettersBeforeIDPages", testListDeadLettersBeforeIDPages},

	// text.go
	{"ErrorTextsAreStoredEscaped", testErrorTextsAreStoredEscaped},
	{"UnstorablePayloadIsRefusedAndChangesNothing", testUnstorablePayloadIsRefusedAndChangesNothing},

	// delayedstart.go
	{"CreateRunWithStartAtHoldsTheFirstTask", testCreateRunWithStartAtHoldsTheFirstTask},
	{"CreateRunWithPastStartAtStartsAtOnce", testCreateRunWithPastStartAtStartsAtOnce},
	{"TerminateEndsAHeldRun", testTerminateEndsAHeldRun},

	// asyncoutcomes.go
	{"HandedOffClaimStaysWithItsNewHolder", testHandedOffClaimStaysWithItsNewHolder},
	{"HeldOutcomeResolvesOnlyAHeldClaim", testHeldOutcomeResolvesOnlyAHeldClaim},

	// timers.go
	{"TimersFireOnceWhenDue", testTimersFireOnceWhenDue},
	{"FireTimersHonoursLimitAndSkip", testFireTimersHonoursLimitAndSkip},
	{"FireTimersClaimsForTheFiringWorker", testFireTimersClaimsForTheFiringWorker},
	{"CanceledTimersAndTimersOfClosedRunsNeverFire", testCanceledTimersAndTimersOfClosedRunsNeverFire},

	// notes.go
	{"NotesReachEveryListener", testNotesReachEveryListener},
	{"WritesAnnounceWhatTheyAreAskedTo", testWritesAnnounceWhatTheyAreAskedTo},

	// groupcommit.go
	{"GroupCommitTakesEveryWriteEffect", testGroupCommitTakesEveryWriteEffect},

	// admin.go
	{"ListRunsFiltersNewestFirst", testListRunsFiltersNewestFirst},
	{"ListEventsOfRunsReturnsWholeHistories", testListEventsOfRunsReturnsWholeHistories},
	{"ListPendingActivitiesShowsEachAttempt", testListPendingActivitiesShowsEachAttempt},
	{"QueueStatsCountsTasksAndTimersPerQueue", testQueueStatsCountsTasksAndTimersPerQueue},
	{"DeadLetterStatsCountWhatWaitsForARedrive", testDeadLetterStatsCountWhatWaitsForARedrive},
	{"ActivityStatsCountEachEndingOnce", testActivityStatsCountEachEndingOnce},
	{"IdleUntilNamesTheNextDueTimeWhileNothingRuns", testIdleUntilNamesTheNextDueTimeWhileNothingRuns},

	// database.go
	{"MigrateOnACurrentSchemaAppliesNothing", testMigrateOnACurrentSchemaAppliesNothing},
	{"EnginesRecordThemselves", testEnginesRecordThemselves},
	{"PlanMigrationNamesTheEnginesItWouldBreak", testPlanMigrationNamesTheEnginesItWouldBreak},
	{"NowReadsTheDatabaseClock", testNowReadsTheDatabaseClock},
	{"TransientIsFalseForAnswers", testTransientIsFalseForAnswers},
}

// The fixtures' defaults.
const (
	wfQueue  = "wf"
	actQueue = "act"
	worker   = "worker-1"
	wfLease  = 30 * time.Second
	actLease = time.Minute
)

// epoch is every case's starting time: whole microseconds, UTC.
var epoch = time.Date(2030, time.January, 2, 3, 4, 5, 6000, time.UTC)

// bundle is what every case starts from.
type bundle struct {
	ctx context.Context
	s   store.Store
	// now is the case's clock; cases move it forward by hand.
	now time.Time
}

// createRun starts a run of workflow "Order" on queue at b.now.
func (b *bundle) createRun(t *testing.T, workflowID, queue string) store.Run {
	t.Helper()
	run, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "Order", Queue: queue,
		Input: json.RawMessage(`{"order":1}`), Now: b.now,
	})
	require.NoError(t, err)
	return run
}

// claimWorkflow claims workflow tasks on queue at now, as worker.
func (b *bundle) claimWorkflow(t *testing.T, queue, workerID string, limit int, now time.Time) []store.WorkflowTask {
	t.Helper()
	tasks, err := b.s.ClaimWorkflowTasks(b.ctx, store.ClaimParams{
		Queue: queue, WorkerID: workerID, Limit: limit, Now: now, Lease: wfLease,
	})
	require.NoError(t, err)
	return tasks
}

// claimOneWorkflow claims the one ready workflow task on queue at now.
func (b *bundle) claimOneWorkflow(t *testing.T, queue string, now time.Time) store.WorkflowTask {
	t.Helper()
	tasks := b.claimWorkflow(t, queue, worker, 10, now)
	require.Len(t, tasks, 1, "ready workflow tasks on queue %q at %v", queue, now)
	return tasks[0]
}

// claimActivity claims activity tasks on actQueue at now, as worker.
func (b *bundle) claimActivity(t *testing.T, workerID string, limit int, now time.Time) []store.ActivityTask {
	t.Helper()
	tasks, err := b.s.ClaimActivityTasks(b.ctx, store.ClaimParams{
		Queue: actQueue, WorkerID: workerID, Limit: limit, Now: now,
	})
	require.NoError(t, err)
	return tasks
}

// claimOneActivity claims the one ready activity task on actQueue at now.
func (b *bundle) claimOneActivity(t *testing.T, now time.Time) store.ActivityTask {
	t.Helper()
	tasks := b.claimActivity(t, worker, 10, now)
	require.Len(t, tasks, 1, "ready activity tasks at %v", now)
	return tasks[0]
}

// activity returns the n-th activity a run schedules.
func activity(run store.Run, seq int64, maxAttempts int) (history.ActivityScheduled, store.NewActivityTask) {
	ev := history.ActivityScheduled{
		Seq: seq, Activity: "Charge", Queue: actQueue,
		Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq)), Options: json.RawMessage(`{"queue":"act"}`),
	}
	task := store.NewActivityTask{
		Seq: seq, Activity: ev.Activity, Queue: actQueue, Input: ev.Input,
		IdempotencyKey: fmt.Sprintf("%s:%d", run.RunID, seq), MaxAttempts: maxAttempts,
		Options: ev.Options, Lease: actLease,
	}
	return ev, task
}

// runWithActivities starts a run and commits its first workflow task, which
// schedules n activities (seq 1..n, ready at b.now, event IDs 2..n+1). The run
// is left with no workflow task.
func (b *bundle) runWithActivities(t *testing.T, workflowID string, n, maxAttempts int) store.Run {
	t.Helper()
	run := b.createRun(t, workflowID, wfQueue)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	commit := store.CommitWorkflowTaskParams{RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: b.now}
	for seq := int64(1); seq <= int64(n); seq++ {
		ev, at := activity(run, seq, maxAttempts)
		at.RunAfter = b.now
		commit.Events = append(commit.Events, ev)
		commit.Activities = append(commit.Activities, at)
	}
	require.NoError(t, b.commit(commit))
	return run
}

// closeRun claims the run's workflow task and commits it closing the run.
func (b *bundle) closeRun(t *testing.T, run store.Run, now time.Time) {
	t.Helper()
	task := b.claimOneWorkflow(t, run.Queue, now)
	require.Equal(t, run.RunID, task.RunID)
	last := b.getRun(t, run.RunID).LastEventID
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: last,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`"done"`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"done"`)},
		Now:    now,
	}))
}

// completion is ResolveActivityParams completing the claimed task t.
func completion(task store.ActivityTask, now time.Time) store.ResolveActivityParams {
	return store.ResolveActivityParams{
		TaskID: task.ID, Attempt: task.Attempt, Now: now,
		Event: history.ActivityCompleted{Seq: task.Seq, Result: json.RawMessage(`"ok"`), Attempt: task.Attempt},
	}
}

func (b *bundle) getRun(t *testing.T, runID string) store.Run {
	t.Helper()
	run, err := b.s.GetRun(b.ctx, runID)
	require.NoError(t, err)
	return run
}

func (b *bundle) events(t *testing.T, runID string) []history.Event {
	t.Helper()
	events, err := b.s.ListEvents(b.ctx, runID, 0)
	require.NoError(t, err)
	return events
}

// eventTypes returns the wire types of events, in order.
func eventTypes(events []history.Event) []string {
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type()
	}
	return types
}

// requireIDsInOrder fails unless events are numbered 1, 2, 3, ...
func requireIDsInOrder(t *testing.T, events []history.Event) {
	t.Helper()
	for i, e := range events {
		require.Equal(t, int64(i+1), e.ID, "ID of event %d of %d", i+1, len(events))
	}
}

// requireTime fails unless got is the instant want, whatever its location.
func requireTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s: want %v, got %v", what, want, got)
}

// commit is CommitWorkflowTask for cases that do not look at what became ready.
func (b *bundle) commit(in store.CommitWorkflowTaskParams) error {
	_, err := b.s.CommitWorkflowTask(b.ctx, in)
	return err
}

// resolve is ResolveActivity for cases that do not look at what became ready.
func (b *bundle) resolve(in store.ResolveActivityParams) error {
	_, err := b.s.ResolveActivity(b.ctx, in)
	return err
}
