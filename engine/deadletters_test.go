package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// heldJob is a job that fails for good with input 1 and, with input 2,
// runs until released.
type heldJob struct {
	failed  atomic.Int32
	started chan struct{}
	release chan struct{}
}

func (j *heldJob) Run(ctx context.Context, n int) (string, error) {
	if n == 1 {
		j.failed.Add(1)
		return "", activity.Permanent(errors.New("invalid address"))
	}
	close(j.started)
	select {
	case <-j.release:
		return "shipped", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// pendingDeadLetters returns the IDs of the dead letters of kind not redriven yet.
func pendingDeadLetters(t *testing.T, e *engine.Engine, kind engine.DeadLetterKind) []int64 {
	t.Helper()
	ds, err := e.DeadLetters(t.Context(), engine.DeadLetterFilter{Kind: kind, Pending: true})
	require.NoError(t, err)
	ids := []int64{}
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	return ids
}

// A pending job holds its idempotency key: redriving a dead job with that
// key cannot queue it, and must say so rather than report a redrive that
// queued nothing. RedriveAll goes on with the others and names it.
func TestRedriveJobHeldByPendingJobIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	job := &heldJob{started: make(chan struct{}), release: make(chan struct{})}
	require.NoError(t, engine.RegisterActivity(e, job.Run, activity.Options{Name: "Ship"}))
	run(t, e)
	release := sync.OnceFunc(func() { close(job.release) })
	t.Cleanup(release) // before the engine stops, if the test fails early
	ctx := resultCtx(t)

	_, err := engine.Enqueue(ctx, e, job.Run, 1, engine.JobOptions{Key: "ship-1"})
	require.NoError(t, err)
	d := waitDeadLetter(t, e, engine.DeadJob)
	_, err = engine.Enqueue(ctx, e, job.Run, 1, engine.JobOptions{Key: "ship-2"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(pendingDeadLetters(t, e, engine.DeadJob)) == 2 },
		20*time.Second, 5*time.Millisecond, "ship-2 fails for good too")
	// A new job with ship-1's key, running.
	held, err := engine.Enqueue(ctx, e, job.Run, 2, engine.JobOptions{Key: "ship-1"})
	require.NoError(t, err)
	require.False(t, held.Existing)
	<-job.started

	res, err := e.Redrive(ctx, d.ID)
	require.ErrorIs(t, err, engine.ErrRedriveConflict)
	require.ErrorContains(t, err, fmt.Sprintf(`job with idempotency key "ship-1" is already pending (task %d)`, held.ID))
	require.False(t, res.Redriven)
	got, err := e.DeadLetter(ctx, d.ID)
	require.NoError(t, err)
	require.Nil(t, got.RedrivenAt, "a refused redrive leaves the dead letter pending")

	n, err := e.RedriveAll(ctx, engine.DeadLetterFilter{Kind: engine.DeadJob})
	require.ErrorIs(t, err, engine.ErrRedriveConflict)
	require.ErrorContains(t, err, "dead letter "+strconv.FormatInt(d.ID, 10))
	require.Equal(t, 1, n, "ship-2 is redriven; ship-1 is skipped")
	require.Contains(t, pendingDeadLetters(t, e, engine.DeadJob), d.ID)

	// Once the held job has finished, the dead one is queued and runs.
	release()
	require.Eventually(t, func() bool {
		var tasks int
		return pool.QueryRow(ctx, "SELECT count(*) FROM durable_activity_tasks WHERE idempotency_key = 'ship-1'").Scan(&tasks) == nil && tasks == 0
	}, 20*time.Second, 5*time.Millisecond, "the held job finishes")
	before := job.failed.Load()
	res, err = e.Redrive(ctx, d.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	require.Eventually(t, func() bool { return job.failed.Load() > before }, 20*time.Second, 5*time.Millisecond,
		"the redriven job runs again")
}

// A workflow ID names at most one open run: a dead run of that ID is not
// redriven while one is open, and stays pending.
func TestRedriveWorkflowHeldByOpenRunIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	wf := func(ctx workflow.Context, n int) (int, error) {
		if n == 1 {
			return 0, errors.New("card declined")
		}
		return n, workflow.Sleep(ctx, time.Hour)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Order"}))
	run(t, e)
	ctx := resultCtx(t)
	failed, err := engine.Start(ctx, e, wf, 1, engine.StartOptions{ID: "order-1"})
	require.NoError(t, err)
	_, err = failed.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	d := waitDeadLetter(t, e, engine.DeadWorkflow)
	open, err := engine.Start(ctx, e, wf, 2, engine.StartOptions{ID: "order-1"})
	require.NoError(t, err)
	require.False(t, open.Existing)

	res, err := e.Redrive(ctx, d.ID)
	require.ErrorIs(t, err, engine.ErrRedriveConflict)
	require.ErrorContains(t, err, fmt.Sprintf(`workflow "order-1" has an open run %s`, open.RunID))
	require.False(t, res.Redriven)
	require.Equal(t, []int64{d.ID}, pendingDeadLetters(t, e, engine.DeadWorkflow), "a refused redrive leaves the dead letter pending")

	n, err := e.RedriveAll(ctx, engine.DeadLetterFilter{})
	require.ErrorIs(t, err, engine.ErrRedriveConflict)
	require.Zero(t, n)
	require.Equal(t, []int64{d.ID}, pendingDeadLetters(t, e, engine.DeadWorkflow))
}
