package storetest

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// job is a standalone job of activity "Ship" with key and input, ready at b.now.
func (b *bundle) job(key, input string) store.NewActivityTask {
	return store.NewActivityTask{
		Activity: "Ship", Queue: actQueue, Input: json.RawMessage(input), IdempotencyKey: key,
		MaxAttempts: 1, Options: json.RawMessage(`{"queue":"act"}`), Lease: actLease, RunAfter: b.now,
	}
}

// enqueueJob enqueues a job with key and input and returns its task ID.
func (b *bundle) enqueueJob(t *testing.T, key, input string) int64 {
	t.Helper()
	id, existing, err := b.s.EnqueueJob(b.ctx, store.EnqueueJobParams{Task: b.job(key, input), Now: b.now})
	require.NoError(t, err)
	require.False(t, existing, "no job with key %q is pending", key)
	return id
}

// deadJob enqueues a job with key and input, claims it and fails it for good,
// and returns the dead letter it becomes.
func (b *bundle) deadJob(t *testing.T, key, input string) store.DeadLetter {
	t.Helper()
	b.enqueueJob(t, key, input)
	task := b.claimOneActivity(t, b.now)
	require.NoError(t, b.resolve(store.ResolveActivityParams{
		TaskID: task.ID, Attempt: task.Attempt, Now: b.now,
		Event: history.ActivityFailed{Failure: history.Failure{Message: "invalid address", Class: "permanent", Attempts: 1}},
	}))
	ds, err := b.s.ListDeadLetters(b.ctx, store.DeadLetterFilter{Kind: store.DeadJob, Pending: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, ds, 1, "the failed job is a dead letter")
	require.Equal(t, key, ds[0].IdempotencyKey)
	return ds[0]
}

// deadRun starts a run with workflowID and fails it in its first workflow
// task, and returns the dead letter it becomes.
func (b *bundle) deadRun(t *testing.T, workflowID string) store.DeadLetter {
	t.Helper()
	run := b.createRun(t, workflowID, wfQueue)
	task := b.claimOneWorkflow(t, wfQueue, b.now)
	failure := history.Failure{Message: "card declined", Class: "permanent"}
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: task.Token, ProcessedEventID: 1, Now: b.now,
		Events: []history.Attributes{history.WorkflowFailed{Failure: failure}},
		Close:  &store.CloseRun{Status: store.StatusFailed, Failure: &failure},
	}))
	ds, err := b.s.ListDeadLetters(b.ctx, store.DeadLetterFilter{Kind: store.DeadWorkflow, Pending: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, ds, 1, "the failed run is a dead letter")
	require.Equal(t, run.RunID, ds[0].RunID)
	return ds[0]
}

// redrive redrives dead letter id at b.now.
func (b *bundle) redrive(id int64) (store.RedriveResult, error) {
	return b.s.RedriveDeadLetter(b.ctx, store.RedriveParams{
		ID: id, Now: b.now, NewRunID: uuid.NewString(),
		Task: func(runID string, a history.ActivityScheduled) (store.NewActivityTask, error) {
			return store.NewActivityTask{
				Seq: a.Seq, Activity: a.Activity, Queue: a.Queue, Input: a.Input, Options: a.Options,
				MaxAttempts: 1, Lease: actLease, RunAfter: b.now,
			}, nil
		},
	})
}

// requirePending fails unless dead letter id is still waiting to be redriven.
func (b *bundle) requirePending(t *testing.T, id int64, why string) {
	t.Helper()
	d, err := b.s.GetDeadLetter(b.ctx, id)
	require.NoError(t, err)
	require.Nil(t, d.RedrivenAt, why)
	require.Empty(t, d.RedriveRunID, why)
}

// A job's idempotency key is unique among pending jobs: while another job
// holds it, redriving the dead job queues nothing, so it must say so and
// leave the dead letter to be redriven later, not mark it redriven.
func testRedriveJobHeldByPendingJobIsRefused(t *testing.T, b *bundle) {
	d := b.deadJob(t, "ship-1", `"dead"`)
	pending := b.enqueueJob(t, "ship-1", `"new"`)

	res, err := b.redrive(d.ID)
	require.ErrorIs(t, err, store.ErrConflict, "the pending job holds the key: nothing can be queued")
	require.Equal(t, pending, res.PendingTaskID, "the conflict names the job that holds the key")
	require.False(t, res.Redriven)
	require.Empty(t, res.Ready.ActivityQueues, "nothing was queued")
	b.requirePending(t, d.ID, "a refused redrive leaves the dead letter pending")

	// Once the pending job has finished, the redrive queues the dead job.
	task := b.claimOneActivity(t, b.now)
	require.Equal(t, pending, task.ID)
	require.NoError(t, b.resolve(completion(task, b.now)))
	res, err = b.redrive(d.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	require.Zero(t, res.PendingTaskID)
	require.Equal(t, []string{actQueue}, res.Ready.ActivityQueues)
	again := b.claimOneActivity(t, b.now)
	require.Equal(t, "ship-1", again.IdempotencyKey)
	require.JSONEq(t, `"dead"`, string(again.Input), "the dead letter's payload runs again")
	require.Equal(t, 1, again.Attempt, "with a fresh attempt budget")
}

// A workflow's ID names at most one open run: while one is open, redriving
// a dead run of that ID starts nothing, says which run holds the ID, and
// leaves the dead letter pending.
func testRedriveWorkflowHeldByOpenRunIsRefused(t *testing.T, b *bundle) {
	d := b.deadRun(t, "order-1")
	open := b.createRun(t, "order-1", wfQueue)

	res, err := b.redrive(d.ID)
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, open.RunID, res.OpenRunID, "the conflict names the run that holds the workflow ID")
	require.False(t, res.Redriven)
	require.Empty(t, res.RunID, "no run was started")
	b.requirePending(t, d.ID, "a refused redrive leaves the dead letter pending")

	b.closeRun(t, open, b.now)
	res, err = b.redrive(d.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	require.Empty(t, res.OpenRunID)
	require.Equal(t, store.StatusRunning, b.getRun(t, res.RunID).Status, "the redriven workflow continues in a new run")
}

// BeforeID pages through the dead letters, newest first.
func testListDeadLettersBeforeIDPages(t *testing.T, b *bundle) {
	var ids []int64
	for _, key := range []string{"ship-1", "ship-2", "ship-3"} {
		ids = append(ids, b.deadJob(t, key, `"x"`).ID)
	}
	page := func(before int64) []int64 {
		t.Helper()
		ds, err := b.s.ListDeadLetters(b.ctx, store.DeadLetterFilter{BeforeID: before, Limit: 2})
		require.NoError(t, err)
		got := []int64{}
		for _, d := range ds {
			got = append(got, d.ID)
		}
		return got
	}
	require.Equal(t, []int64{ids[2], ids[1]}, page(0))
	require.Equal(t, []int64{ids[0]}, page(ids[1]), "the page below the first page's last ID")
	require.Empty(t, page(ids[0]))
}
