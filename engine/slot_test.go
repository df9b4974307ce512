package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// The slot tests' activities. slotFirst holds the only activity slot until
// released; slotSecond reports its attempt; slotBusy, a job, signals that
// it started and then holds a slot until released.
var (
	slotFirstStarted, slotBusyStarted  chan struct{}
	slotFirstRelease, slotBusyRelease  chan struct{}
	slotSecondAttempt, slotSecondCalls atomic.Int64
)

func slotFirst(ctx context.Context, n int) (int, error) {
	slotFirstStarted <- struct{}{}
	select {
	case <-slotFirstRelease:
		return n + 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func slotSecond(ctx context.Context, n int) (int, error) {
	slotSecondCalls.Add(1)
	slotSecondAttempt.Store(int64(activity.GetInfo(ctx).Attempt))
	return n + 1, nil
}

func slotBusy(ctx context.Context, n int) (int, error) {
	slotBusyStarted <- struct{}{}
	select {
	case <-slotBusyRelease:
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func slotTwoSteps(ctx workflow.Context, n int) (int, error) {
	n, err := workflow.ExecuteActivity(ctx, slotFirst, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity(ctx, slotSecond, n).Get(ctx)
}

// slotEngine runs an engine with one activity slot whose first fused
// commit waits until slotBusy has started (and reports in busyRan whether
// it did within 5 s), and starts a run of slotTwoSteps once slotFirst holds
// the slot and a slotBusy job is queued behind it. The caller releases
// slotFirst.
func slotEngine(t *testing.T, sc *stepCounter) (run *Run[int], busyRan *atomic.Bool) {
	t.Helper()
	slotFirstStarted, slotBusyStarted = make(chan struct{}, 1), make(chan struct{}, 1)
	slotFirstRelease, slotBusyRelease = make(chan struct{}), make(chan struct{})
	slotSecondAttempt.Store(0)
	slotSecondCalls.Store(0)
	busyRan = &atomic.Bool{}
	var waited atomic.Bool
	sc.beforeFused = func(context.Context, store.Store, store.CommitWorkflowTaskParams) {
		if waited.Swap(true) {
			return
		}
		select {
		case <-slotBusyStarted:
			busyRan.Store(true)
		case <-time.After(5 * time.Second):
		}
	}
	e := fusedEngine(t, sc, &syncbuf.Buffer{}, func(o *Options) {
		o.Queues = map[string]QueueOptions{DefaultQueue: {ActivityConcurrency: 1}}
	})
	require.NoError(t, RegisterWorkflow(e, slotTwoSteps, WorkflowOptions{}))
	require.NoError(t, RegisterActivity(e, slotFirst, activity.Options{}))
	// The lease of slotSecond's claim is 2 s: a claim that finds no slot
	// goes back after 200 ms (slotWait). One attempt: a claim given back
	// must not spend it.
	require.NoError(t, RegisterActivity(e, slotSecond, activity.Options{
		StartToCloseTimeout: 2 * time.Second, Retry: activity.RetryPolicy{MaximumAttempts: 1},
	}))
	require.NoError(t, RegisterActivity(e, slotBusy, activity.Options{}))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := Start(ctx, e, slotTwoSteps, 1, StartOptions{})
	require.NoError(t, err)
	<-slotFirstStarted // the only activity slot is taken
	_, err = Enqueue(ctx, e, slotBusy, 0, JobOptions{})
	require.NoError(t, err)
	return run, busyRan
}

// A step that takes a step slot gives its activity's slot back before it
// commits: a job queued behind the only activity slot runs while the
// step's commit waits for it.
func TestStepFreesItsActivitySlotWhileItCommits(t *testing.T) {
	sc := &stepCounter{}
	run, busyRan := slotEngine(t, sc)
	close(slotBusyRelease) // the job ends as soon as it starts
	close(slotFirstRelease)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, got)
	require.True(t, busyRan.Load(), "the job ran in the freed slot while the step committed")
	require.Equal(t, int64(1), slotSecondCalls.Load())
	require.Equal(t, int64(1), slotSecondAttempt.Load(), "the step's claim ran once a slot was free")
	require.Zero(t, sc.snap().givenBack)
}

// The task a step claims for its slot waits for a slot at most slotWait,
// then goes back to its queue without spending its attempt, and runs when
// a slot frees up.
func TestTaskClaimedForABusySlotGoesBack(t *testing.T) {
	sc := &stepCounter{}
	run, busyRan := slotEngine(t, sc)
	close(slotFirstRelease)
	require.Eventually(t, func() bool { return sc.snap().givenBack == 1 }, 10*time.Second, time.Millisecond,
		"the step's claim went back: the job holds the only slot")
	require.True(t, busyRan.Load(), "the job took the freed slot while the step committed")
	require.Zero(t, slotSecondCalls.Load())
	close(slotBusyRelease)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := run.Result(ctx)
	require.NoError(t, err, "the claim given back did not spend the only attempt")
	require.Equal(t, 3, got)
	require.Equal(t, int64(1), slotSecondCalls.Load())
	require.Equal(t, int64(2), slotSecondAttempt.Load(), "the second claim of the task")
}
