package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

func plusOne(_ workflow.Context, n int) (int, error) { return n + 1, nil }

// Result asks again while the database does not answer, instead of giving
// up on a run that goes on without it.
func TestResultWaitsOutAnOutage(t *testing.T) {
	t.Parallel()
	inj := newFaultInjector(1, 0)
	e, err := newOnPool(pgtest.Pool(t), Options{Logger: ambLogger(), PollInterval: 100 * time.Millisecond}, inj.wrap)
	require.NoError(t, err)
	require.NoError(t, RegisterWorkflow(e, plusOne, WorkflowOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Start(ctx, e, plusOne, 41, StartOptions{})
	require.NoError(t, err)

	inj.force("GetRun", fateBefore, fateBefore, fateBefore, fateBefore) // the outage
	runUntilTestEnds(t, e)

	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 42, got)
	calls, _, _ := inj.counts()
	require.GreaterOrEqual(t, calls["GetRun"], 5, "Result asked through the outage")
}

func napThenOne(ctx workflow.Context, n int) (int, error) {
	if err := workflow.Sleep(ctx, time.Hour); err != nil {
		return 0, err
	}
	return n + 1, nil
}

// A history read that fails because the database does not answer is
// retried, and is not a failure of the run's task.
func TestHistoryReadWaitsOutAnOutage(t *testing.T) {
	t.Parallel()
	inj := newFaultInjector(1, 0)
	log := &syncbuf.Buffer{}
	var skew atomic.Int64 // the clock jumps past the hour's sleep
	e, err := newOnPool(pgtest.Pool(t), Options{Logger: slog.New(slog.NewTextHandler(log, nil)),
		PollInterval: 100 * time.Millisecond, WorkflowTaskLease: time.Minute,
		NowFunc: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}, inj.wrap)
	require.NoError(t, err)
	require.NoError(t, RegisterWorkflow(e, napThenOne, WorkflowOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runUntilTestEnds(t, e)

	// The run leaves the cache while it sleeps for an hour, so the task
	// after the timer reads the history: the first three reads fail.
	r, err := Start(ctx, e, napThenOne, 1, StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := e.Describe(ctx, r.WorkflowID)
		return err == nil && len(d.PendingTimers) == 1
	}, 10*time.Second, 5*time.Millisecond, "the run sleeps")
	inj.force("ListEvents", fateBefore, fateBefore, fateBefore)
	skew.Store(int64(2 * time.Hour))
	e.hub.Publish(notify.Timers)
	got, err := r.Result(ctx) // well before the one-minute lease
	require.NoError(t, err)
	require.Equal(t, 2, got)
	calls, _, _ := inj.counts()
	require.GreaterOrEqual(t, calls["ListEvents"], 4, "the read was retried")
	require.NotContains(t, log.String(), "workflow task failed")
}
