package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// The cases of this file cover an activity whose result comes later, from
// anywhere (an asynchronous completion): its attempt's worker hands the
// claim off (HeartbeatParams.HandOff), and the outcome, from outside the
// attempt, is recorded only while the attempt holds its claim
// (ResolveActivityParams.Held).

// pendingActivity returns the run's pending activity seq.
func (b *bundle) pendingActivity(t *testing.T, runID string, seq int64) store.PendingActivity {
	t.Helper()
	acts, err := b.s.ListPendingActivities(b.ctx, runID)
	require.NoError(t, err)
	for _, a := range acts {
		if a.Seq == seq {
			return a
		}
	}
	require.FailNow(t, "no such pending activity", "run %s, seq %d, among %+v", runID, seq, acts)
	return store.PendingActivity{}
}

// A handed-off claim is its new holder's: the attempt's worker no longer
// gives it back on shutdown, and the heartbeat details it had are kept.
func testHandedOffClaimStaysWithItsNewHolder(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 2, 0)
	acts := b.claimActivity(t, worker, 2, b.now)
	require.Len(t, acts, 2)
	async, plain := acts[0], acts[1]
	beat := store.HeartbeatParams{
		TaskID: async.ID, Attempt: async.Attempt, RunID: run.RunID, Seq: async.Seq,
		Details: json.RawMessage(`{"step":1}`), LockedUntil: b.now.Add(actLease),
	}
	require.NoError(t, b.s.HeartbeatActivity(b.ctx, beat))
	until := b.now.Add(time.Hour)
	beat.Details, beat.LockedUntil, beat.HandOff = json.RawMessage(`{"step":2}`), until, "async"
	require.NoError(t, b.s.HeartbeatActivity(b.ctx, beat))

	require.NoError(t, b.s.ReleaseActivityTasks(b.ctx, store.ReleaseParams{WorkerID: worker, Now: b.now}))
	handed := b.pendingActivity(t, run.RunID, async.Seq)
	require.Equal(t, "async", handed.LockedBy)
	require.NotNil(t, handed.LockedUntil)
	requireTime(t, until, *handed.LockedUntil, "the hand-off's lease")
	require.Equal(t, 1, handed.Attempts)
	require.JSONEq(t, `{"step":1}`, string(handed.Heartbeat), "a hand-off keeps the details there were")
	require.Empty(t, b.pendingActivity(t, run.RunID, plain.Seq).LockedBy, "the worker's other claim was given back")

	later := b.now.Add(actLease + time.Second)
	again := b.claimActivity(t, "worker-2", 10, later)
	require.Len(t, again, 1, "the handed-off activity is held past its first lease")
	require.Equal(t, plain.ID, again[0].ID)

	require.NoError(t, b.resolve(store.ResolveActivityParams{
		RunID: run.RunID, TaskID: async.ID, Attempt: async.Attempt, Now: later, Held: true,
		Event: history.ActivityCompleted{Seq: async.Seq, Result: json.RawMessage(`"late"`), Attempt: async.Attempt},
	}), "the outcome comes from outside the attempt")
	events := b.events(t, run.RunID)
	require.Equal(t, "activity_completed", events[len(events)-1].Type())
	require.Len(t, b.claimWorkflow(t, wfQueue, worker, 10, later), 1)
}

// An outcome with Held resolves the attempt only while it holds its claim:
// not once the attempt failed and the task waits for its retry, nor once
// another attempt took it, nor twice.
func testHeldOutcomeResolvesOnlyAHeldClaim(t *testing.T, b *bundle) {
	run := b.runWithActivities(t, "order-1", 1, 0)
	first := b.claimOneActivity(t, b.now)
	held := func(a store.ActivityTask, now time.Time) error {
		return b.resolve(store.ResolveActivityParams{
			RunID: run.RunID, TaskID: a.ID, Attempt: a.Attempt, Now: now, Held: true,
			Event: history.ActivityCompleted{Seq: a.Seq, Result: json.RawMessage(`"ok"`), Attempt: a.Attempt},
		})
	}
	retryAt := b.now.Add(time.Minute)
	require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{
		TaskID: first.ID, Attempt: first.Attempt, RunAfter: retryAt, Error: "boom", Now: b.now,
	}))
	require.ErrorIs(t, held(first, b.now), store.ErrLeaseLost, "the task waits for its retry: no attempt holds it")
	require.Equal(t, []string{"workflow_started", "activity_scheduled"}, eventTypes(b.events(t, run.RunID)), "nothing appended")
	waiting := b.pendingActivity(t, run.RunID, first.Seq)
	require.Empty(t, waiting.LockedBy)
	require.Equal(t, "boom", waiting.LastError)

	second := b.claimOneActivity(t, retryAt)
	require.Equal(t, 2, second.Attempt)
	require.ErrorIs(t, held(first, retryAt), store.ErrLeaseLost, "another attempt holds the task")
	require.NoError(t, held(second, retryAt))
	require.ErrorIs(t, held(second, retryAt), store.ErrLeaseLost, "recorded once")
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed"}, eventTypes(b.events(t, run.RunID)))
}
