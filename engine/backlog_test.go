package engine

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/workflow"
)

// The backlog test's activities: hold blocks until released; note records
// the order in which its calls ran.
var (
	holdStarted, holdRelease chan struct{}
	notedMu                  sync.Mutex
	noted                    []int
)

func hold(context.Context, int) (int, error) {
	holdStarted <- struct{}{}
	<-holdRelease
	return 0, nil
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
// claimed before older tasks of the queue: its run is cached here.
func TestClaimTakesTheBacklogFirst(t *testing.T) {
	holdStarted, holdRelease = make(chan struct{}, 1), make(chan struct{})
	noted = nil
	e, err := New(pgtest.Pool(t), Options{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond,
		Queues: map[string]QueueOptions{DefaultQueue: {ActivityConcurrency: 1}}})
	require.NoError(t, err)
	require.NoError(t, RegisterWorkflow(e, holdOnce, WorkflowOptions{}))
	require.NoError(t, RegisterWorkflow(e, noteOnce, WorkflowOptions{}))
	require.NoError(t, RegisterActivity(e, hold, activity.Options{}))
	require.NoError(t, RegisterActivity(e, note, activity.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	held, err := Start(ctx, e, holdOnce, 0, StartOptions{})
	require.NoError(t, err)
	<-holdStarted // the only activity slot is taken
	_, err = Enqueue(ctx, e, note, 1, JobOptions{})
	require.NoError(t, err)
	run, err := Start(ctx, e, noteOnce, 2, StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.backlog.mu.Lock()
		defer e.backlog.mu.Unlock()
		q := e.backlog.queues[DefaultQueue]
		return q != nil && len(q.keys) == 1
	}, 10*time.Second, time.Millisecond, "the run's activity waits in the backlog")

	close(holdRelease)
	_, err = held.Result(ctx)
	require.NoError(t, err)
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
	require.Equal(t, []int{2, 1}, noted, "the backlog's activity first, then the older job")
}

// The backlog gives its oldest entries, leaves one slot to the queue every
// backlogShare-th claim, and past backlogMax drops its oldest.
func TestBacklogTakeAndBounds(t *testing.T) {
	b := newActivityBacklog()
	acts := make([]store.NewActivityTask, backlogMax+2)
	for i := range acts {
		acts[i] = store.NewActivityTask{Seq: int64(i + 1), Queue: "q"}
	}
	b.push("r", acts)
	require.Nil(t, b.take("other", 3))
	got := b.take("q", 2)
	require.Equal(t, []store.ActivityKey{{RunID: "r", Seq: 3}, {RunID: "r", Seq: 4}}, got,
		"the oldest two were dropped past backlogMax")
	for i := 2; i < backlogShare; i++ {
		require.Len(t, b.take("q", 1), 1, "claim %d", i)
	}
	require.Empty(t, b.take("q", 1), "claim %d leaves its one slot to the queue", backlogShare)
	require.Len(t, b.take("q", 1), 1)
}
