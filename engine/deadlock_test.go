package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// spinner controls the runs of Spin started with its key: they loop,
// without a workflow call, until it is released.
type spinner struct {
	key     string
	release atomic.Bool
	line    atomic.Int64 // the line of the loop
	once    sync.Once
	entered chan struct{} // closed when the code first runs
}

var spinners sync.Map // key -> *spinner

// newSpinner returns a spinner released when the test ends.
func newSpinner(t *testing.T, name string) *spinner {
	s := &spinner{key: t.Name() + "/" + name, entered: make(chan struct{})}
	spinners.Store(s.key, s)
	t.Cleanup(func() { s.release.Store(true) })
	return s
}

// serving waits until e, just run, serves its queues: a run it starts then
// runs its first task in Start (an eager start).
func serving(t *testing.T, e *engine.Engine) {
	t.Helper()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, Pipeline, 0, engine.StartOptions{})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.NoError(t, err)
}

// Spin loops until its spinner is released, and returns 1.
func Spin(_ workflow.Context, key string) (int, error) {
	v, _ := spinners.Load(key)
	s := v.(*spinner)
	s.once.Do(func() { close(s.entered) })
	_, _, line, _ := runtime.Caller(0)
	s.line.Store(int64(line) + 2)
	for !s.release.Load() { // no workflow call: the code never yields
	}
	return 1, nil
}

// await waits for c, or fails the test after d with msg.
func await[T any](t *testing.T, c <-chan T, d time.Duration, msg string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		require.FailNow(t, msg)
		panic("unreachable")
	}
}

// A run whose code never yields fails its task: Start returns within its
// deadline, the queue's one workflow slot serves other runs, and the run
// shows why in Describe, the log and the task-failure metric.
func TestBusyWorkflowFailsItsTask(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	reg := prometheus.NewRegistry()
	logs := &syncbuf.Buffer{}
	e := newEngine(t, pool, engine.Options{
		Queues:     map[string]engine.QueueOptions{engine.DefaultQueue: {WorkflowConcurrency: 1}},
		Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		WorkflowDeadlockTimeout: 200 * time.Millisecond,
	})
	client := newEngine(t, pool, engine.Options{}) // runs nothing: its runs' tasks go through the queue
	for _, e := range []*engine.Engine{e, client} {
		require.NoError(t, engine.RegisterWorkflow(e, Spin, engine.WorkflowOptions{}))
		registerPipeline(t, e)
	}
	run(t, e)
	serving(t, e)
	eager, queued := newSpinner(t, "eager"), newSpinner(t, "queued")

	type started struct {
		r   *engine.Run[int]
		err error
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan started, 1)
	go func() {
		r, err := engine.Start(ctx, e, Spin, eager.key, engine.StartOptions{})
		done <- started{r, err}
	}()
	s := await(t, done, 6*time.Second, "Start did not return by its context's 3s deadline")
	require.NoError(t, s.err)
	rctx := resultCtx(t)
	q, err := engine.Start(rctx, client, Spin, queued.key, engine.StartOptions{})
	require.NoError(t, err)
	await(t, queued.entered, 10*time.Second, "the worker did not run the queued run")

	other, err := engine.Start(rctx, client, Pipeline, 4, engine.StartOptions{})
	require.NoError(t, err)
	got, err := other.Result(rctx)
	require.NoError(t, err, "another run completes on the queue's one workflow slot")
	require.Equal(t, "n=10", got)

	pos := fmt.Sprintf("deadlock_test.go:%d", eager.line.Load())
	for _, r := range []*engine.Run[int]{s.r, q} {
		var info engine.RunInfo
		require.Eventually(t, func() bool {
			info, err = r.Describe(rctx)
			require.NoError(t, err)
			return info.TaskError != ""
		}, 10*time.Second, 10*time.Millisecond, "the run shows its task's failure")
		require.Contains(t, info.TaskError, "deadlock in run "+r.RunID)
		require.Contains(t, info.TaskError, pos, "the task error names where the code spun")
		require.Contains(t, logs.String(), "deadlock in run "+r.RunID)
	}
	require.GreaterOrEqual(t, value(reg, "durable_workflow_task_failures_total", "reason", "deadlock"), 2.0)
	require.Contains(t, logs.String(), "engine_test.Spin", "the log has the stack where it spun")

	// Once the loops end, the runs go on.
	eager.release.Store(true)
	queued.release.Store(true)
	for _, r := range []*engine.Run[int]{s.r, q} {
		n, err := r.Result(rctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
}

// A Start whose deadline is closer than the deadlock bound does not run the
// code itself: it returns once the run is recorded.
func TestStartHonoursItsContextWithBusyWorkflow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, Spin, engine.WorkflowOptions{}))
	registerPipeline(t, e)
	run(t, e)
	serving(t, e)
	spin := newSpinner(t, "spin")

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := engine.Start(ctx, e, Spin, spin.key, engine.StartOptions{})
		done <- err
	}()
	require.NoError(t, await(t, done, 5*time.Second, "Start did not return by its context's 500ms deadline"))
}

// Run returns after its ShutdownTimeout even while a run's code spins.
func TestBusyWorkflowLetsRunReturn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	w := newEngine(t, pool, engine.Options{ShutdownTimeout: 300 * time.Millisecond, WorkflowDeadlockTimeout: 200 * time.Millisecond})
	client := newEngine(t, pool, engine.Options{})
	for _, e := range []*engine.Engine{w, client} {
		require.NoError(t, engine.RegisterWorkflow(e, Spin, engine.WorkflowOptions{}))
	}
	spin := newSpinner(t, "spin")
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		ran <- w.Run(ctx)
		close(finished)
	}()
	t.Cleanup(func() {
		stop()
		spin.release.Store(true)
		<-finished
	})

	_, err := engine.Start(resultCtx(t), client, Spin, spin.key, engine.StartOptions{})
	require.NoError(t, err)
	await(t, spin.entered, 10*time.Second, "the worker did not run the workflow")
	stop()
	require.NoError(t, await(t, ran, 6*time.Second, "Run did not return after its 300ms ShutdownTimeout"))
}
