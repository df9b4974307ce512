package postgres_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// Starts without a first task that overlap are one statement and one
// commit, and each gets what its own statement would have given it: its
// run, its task claimed or queued, its notification, or the run that was
// there first.
func TestOverlappingStartsShareAStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.PoolWith(t, postgres.CountManyWrites)
	s := postgres.New(pool)
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN durable")
	require.NoError(t, err)

	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	start := func(workflowID, queue string) store.CreateRunParams {
		return store.CreateRunParams{RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "T", Queue: queue,
			Input: json.RawMessage(`1`), Now: now, Waiter: "starter-" + workflowID}
	}
	starts := []store.CreateRunParams{start("order-1", "q"), start("order-2", "q"), start("order-1", "q"), start("order-3", "q")}
	claimed, notified := 1, 3
	starts[claimed].ClaimAs, starts[claimed].Lease = "w", time.Minute
	starts[notified].Queue, starts[notified].Notify = "other", true

	release := s.HoldStarts(t, 64)
	runs, errs := make([]store.Run, len(starts)), make([]error, len(starts))
	var wg sync.WaitGroup
	for i := range starts {
		wg.Go(func() { runs[i], errs[i] = s.CreateRun(ctx, starts[i]) })
	}
	require.Equal(t, len(starts), release(len(starts)), "one statement for all four")
	wg.Wait()

	// Which of the two order-1 starts came first is the statement's order.
	first, second := 0, 2
	if errs[first] != nil {
		first, second = second, first
	}
	require.NoError(t, errs[first])
	require.ErrorIs(t, errs[second], store.ErrConflict)
	require.Equal(t, starts[first].RunID, runs[second].RunID, "the second start finds the first's run")
	require.Equal(t, []string{"workflow_started"}, eventTypes(t, s, starts[first].RunID))
	require.Empty(t, eventTypes(t, s, starts[second].RunID), "nothing of the second start is stored")

	require.NoError(t, errs[claimed])
	require.NotZero(t, runs[claimed].Token, "its task is claimed for the starter")
	require.NoError(t, errs[notified])
	require.Zero(t, runs[notified].Token)
	got, err := s.GetRun(ctx, starts[notified].RunID)
	require.NoError(t, err)
	require.Equal(t, "starter-order-3", got.Waiter, "each run names its own starter")

	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "w:other", n.Payload, "only the start that asked for it notifies")

	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "x", Limit: 10, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 1, "order-1's task is ready; order-2's is held by the starter")
	require.Equal(t, starts[first].RunID, tasks[0].RunID)
}

// A backlog of starts goes in statements of at most the group size.
func TestStartsGroupAtMostTheGroupSize(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	release := s.HoldStarts(t, 2)
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.CreateRun(ctx, store.CreateRunParams{RunID: uuid.NewString(), WorkflowID: fmt.Sprintf("wf-%d", i),
				WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: time.Now()})
		})
	}
	require.Equal(t, 4, release(5), "two statements of two; the fifth start alone")
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "start %d", i)
	}
}

// Reads of runs by ID that overlap are one statement, and each gets its
// run or ErrNotFound; a batch with a malformed ID reads each on its own,
// so that only that one fails.
func TestOverlappingReadsShareAStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.PoolWith(t, postgres.CountManyWrites))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 2 {
		run, err := s.CreateRun(ctx, store.CreateRunParams{RunID: uuid.NewString(), WorkflowID: fmt.Sprintf("wf-%d", i),
			WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: now})
		require.NoError(t, err)
		ids = append(ids, run.RunID)
	}
	read := func(ids ...string) ([]store.Run, []error, int) {
		release := s.HoldReads(t, 64)
		runs, errs := make([]store.Run, len(ids)), make([]error, len(ids))
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() { runs[i], errs[i] = s.GetRun(ctx, ids[i]) })
		}
		merged := release(len(ids))
		wg.Wait()
		return runs, errs, merged
	}

	runs, errs, merged := read(ids[0], uuid.NewString(), ids[1], ids[0])
	require.Equal(t, 2, merged, "one statement for the four reads: it found the two runs they name")
	for _, i := range []int{0, 2, 3} {
		require.NoError(t, errs[i])
	}
	require.Equal(t, ids[0], runs[0].RunID)
	require.Equal(t, "wf-0", runs[0].WorkflowID)
	require.Equal(t, ids[1], runs[2].RunID)
	require.Equal(t, ids[0], runs[3].RunID)
	require.ErrorIs(t, errs[1], store.ErrNotFound)

	runs, errs, merged = read(ids[1], "not-a-uuid")
	require.Zero(t, merged, "the statement failed: each read alone")
	require.NoError(t, errs[0])
	require.Equal(t, ids[1], runs[0].RunID)
	require.Error(t, errs[1])
	require.NotErrorIs(t, errs[1], store.ErrNotFound)
}
