package engine

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/workers"
	"github.com/durable-go/durable/workflow"
)

// The backlog test's activities: hold blocks until released; note records
// the order in which its calls ran.
var (
	holdStarted, holdRelease chan struct{}
	notedMu                  sync.Mutex
	noted                    []int
)

func hold(ctx context.Context, _ int) (int, error) {
	select { // a failed test stops its engine, which cancels ctx
	case holdStarted <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case <-holdRelease:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func note(_ context.Context, n int) (int, error) {
	notedMu.Lock()
	noted = append(noted, n)
	notedMu.Unlock()
	return n, nil
}

func holdOnce(ctx workflow.Context, n int) (int, error) {
	return workflow.ExecuteActivity(ctx, hold, n).Get(ctx)
}

func noteOnce(ctx workflow.Context, n int) (int, error) {
	return workflow.ExecuteActivity(ctx, note, n).Get(ctx)
}

// An activity that a run of this engine scheduled when no slot was free is
// claimed before older tasks of the queue: its run is cached here. The
// slot is freed by a job, whose outcome is no fused step, so the poller
// claims.
func TestClaimTakesTheBacklogFirst(t *testing.T) {
	order, _ := queueBehindTheOnlySlot(t, true, false)
	require.Equal(t, []int{2, 1}, order, "the backlog's activity first, then the older job")
}

// A slot whose activity's run closes, in a step that keeps the slot (no
// step slot is free: see Engine.resolve), takes its engine's backlog's
// next task in the close's transaction (store.CommitWorkflowTaskParams.
// ClaimNext): of the two tasks queued behind the only slot, only the one
// in no backlog (a job) is claimed from the queue.
func TestClosingSlotTakesTheBacklogsNextTask(t *testing.T) {
	order, claimed := queueBehindTheOnlySlot(t, false, true)
	require.Equal(t, []int{2, 1}, order, "the backlog's activity first, then the older job")
	require.Equal(t, 1, claimed, "only the job was claimed from the queue")
}

// queueBehindTheOnlySlot runs, on an engine with one activity slot, hold
// (as a job, or in a run of holdOnce), then queues a job note(1) and a run
// of noteOnce(2) behind it, whose activity goes to the backlog, and lets
// hold finish. It returns the order in which the notes ran and how many
// activity tasks were claimed from the queue after hold started. If
// keepSlot, the engine's only step slot is taken, so that the steps of its
// runs keep their activities' slots (see Engine.resolve).
func queueBehindTheOnlySlot(t *testing.T, holdAsJob, keepSlot bool) (order []int, claimed int) {
	holdStarted, holdRelease = make(chan struct{}, 1), make(chan struct{})
	noted = nil
	sc := &stepCounter{}
	e, err := newOnPool(pgtest.Pool(t), Options{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond,
		Queues: map[string]QueueOptions{DefaultQueue: {ActivityConcurrency: 1}}}, func(s store.Store) store.Store { sc.Store = s; return sc })
	require.NoError(t, err)
	require.NoError(t, RegisterWorkflow(e, holdOnce, WorkflowOptions{}))
	require.NoError(t, RegisterWorkflow(e, noteOnce, WorkflowOptions{}))
	require.NoError(t, RegisterActivity(e, hold, activity.Options{}))
	require.NoError(t, RegisterActivity(e, note, activity.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runUntilTestEnds(t, e)
	if keepSlot {
		var steps *workers.Semaphore
		require.Eventually(t, func() bool {
			steps = e.stepSlots(DefaultQueue)
			return steps != nil
		}, 10*time.Second, time.Millisecond, "the engine runs")
		require.True(t, steps.TryAcquire(), "the only step slot is free")
		defer steps.Release()
	}

	var held *Run[int]
	if holdAsJob {
		_, err = Enqueue(ctx, e, hold, 0, JobOptions{})
	} else {
		held, err = Start(ctx, e, holdOnce, 0, StartOptions{})
	}
	require.NoError(t, err)
	<-holdStarted                   // the only activity slot is taken
	before := sc.snap().claimedActs // the hold's, if it was claimed
	_, err = Enqueue(ctx, e, note, 1, JobOptions{})
	require.NoError(t, err)
	run, err := Start(ctx, e, noteOnce, 2, StartOptions{})
	require.NoError(t, err)
	awaitOnlyInBacklog(t, e, run.RunID)

	close(holdRelease)
	if held != nil {
		_, err = held.Result(ctx)
		require.NoError(t, err)
	}
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Eventually(t, func() bool {
		notedMu.Lock()
		defer notedMu.Unlock()
		return len(noted) == 2
	}, 10*time.Second, time.Millisecond, "the job ran too")
	notedMu.Lock()
	defer notedMu.Unlock()
	return slices.Clone(noted), sc.snap().claimedActs - before
}

// awaitOnlyInBacklog waits until the activity of run runID is in e's
// backlog, and drops any other entry. One can be there: if the poller held
// the only slot, claiming, when the first run started, that run's activity
// went to the backlog and was then claimed as the queue's oldest, which
// leaves its entry behind (a stale entry is passed over, but it would take
// the preference meant for this one).
func awaitOnlyInBacklog(t *testing.T, e *Engine, runID string) {
	t.Helper()
	mine := func(k store.ActivityKey) bool { return k.RunID == runID }
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(e.backlog.Keys(DefaultQueue), mine)
	}, 10*time.Second, time.Millisecond, "the run's activity waits in the backlog")
	keys, _, _ := e.backlog.TakeIfAny(DefaultQueue, backlogMaxForTest)
	var keep []store.NewActivityTask
	for _, k := range keys {
		if mine(k) {
			keep = append(keep, store.NewActivityTask{Seq: k.Seq, Queue: DefaultQueue})
		}
	}
	e.backlog.Push(runID, keep)
}

// backlogMaxForTest is more entries than a test's backlog holds.
const backlogMaxForTest = 1 << 20
