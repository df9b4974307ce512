package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// concurrently runs write(i) for i in [0, n) at once and fails unless
// every one returns nil.
func concurrently(t *testing.T, n int, write func(i int) error) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		wg.Go(func() {
			if err := write(i); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("write %d: %w", i, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// With group commit on, concurrent writes of different runs (eager starts,
// commits, activity outcomes) each take effect as they would alone; once
// it is stopped, writes go on as before.
func testGroupCommitTakesEveryWriteEffect(t *testing.T, b *bundle) {
	const n = 24
	runs := make([]store.Run, n)
	for i := range runs {
		runs[i] = b.createRun(t, fmt.Sprintf("order-%d", i), wfQueue)
	}
	tasks := map[string]store.WorkflowTask{}
	for _, wt := range b.claimWorkflow(t, wfQueue, worker, n, b.now) {
		tasks[wt.RunID] = wt
	}
	require.Len(t, tasks, n)

	stop := b.s.StartGroupCommit(2, 8)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	// Each run's first task schedules an activity; as many runs start
	// eagerly, their first task's activity with them.
	concurrently(t, n, func(i int) error {
		run := runs[i]
		ev, act := activity(run, 1, 0)
		act.RunAfter = b.now
		_, err := b.s.CommitWorkflowTask(b.ctx, store.CommitWorkflowTaskParams{
			RunID: run.RunID, WorkflowID: run.WorkflowID, WorkflowQueue: wfQueue, Token: tasks[run.RunID].Token,
			ProcessedEventID: 1, Now: b.now, Events: []history.Attributes{ev}, Activities: []store.NewActivityTask{act},
		})
		return err
	})
	eager := make([]string, n)
	concurrently(t, n, func(i int) error {
		eager[i] = uuid.NewString()
		ev, act := activity(store.Run{RunID: eager[i]}, 1, 0)
		act.RunAfter = b.now
		workflowID := fmt.Sprintf("eager-%d", i)
		_, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
			RunID: eager[i], WorkflowID: workflowID, WorkflowType: "Order", Queue: wfQueue,
			Input: json.RawMessage(`1`), Now: b.now,
			First: &store.CommitWorkflowTaskParams{
				RunID: eager[i], WorkflowID: workflowID, WorkflowQueue: wfQueue, ProcessedEventID: 1, Now: b.now,
				Events: []history.Attributes{ev}, Activities: []store.NewActivityTask{act},
			},
		})
		return err
	})

	acts := b.claimActivity(t, worker, 4*n, b.now)
	require.Len(t, acts, 2*n, "every commit and every eager start scheduled its activity")
	concurrently(t, len(acts), func(i int) error {
		in := completion(acts[i], b.now)
		in.RunID = acts[i].RunID
		_, err := b.s.ResolveActivity(b.ctx, in)
		return err
	})
	stop()
	stopped = true

	all := eager
	for _, r := range runs {
		all = append(all, r.RunID)
	}
	for _, runID := range all {
		events := b.events(t, runID)
		requireIDsInOrder(t, events)
		require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed"}, eventTypes(events), "run %s", runID)
	}
	next := b.claimWorkflow(t, wfQueue, worker, 4*n, b.now)
	require.Len(t, next, 2*n, "every outcome made its run's workflow task ready")

	// Stopped, the store writes alone.
	wt := next[0]
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{
		RunID: wt.RunID, Token: wt.Token, ProcessedEventID: 3, Now: b.now,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`1`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`1`)},
	}))
	require.Equal(t, store.StatusCompleted, b.getRun(t, wt.RunID).Status)
}
