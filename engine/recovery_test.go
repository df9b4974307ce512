package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// ledger counts activity executions per idempotency key and catches two
// attempts of one key running at the same time.
type ledger struct {
	mu       sync.Mutex
	runs     map[string]int
	inFlight map[string]bool
	overlaps int
	total    atomic.Int64
}

func newLedger() *ledger {
	return &ledger{runs: map[string]int{}, inFlight: map[string]bool{}}
}

func (l *ledger) enter(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[key] {
		l.overlaps++
	}
	l.inFlight[key] = true
	l.runs[key]++
	l.total.Add(1)
}

func (l *ledger) exit(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.inFlight, key)
}

// stepFlow is three sequential steps of an activity that records itself.
type stepFlow struct {
	l     *ledger
	delay time.Duration
}

func (s *stepFlow) Step(ctx context.Context, n int) (int, error) {
	key := activity.GetInfo(ctx).IdempotencyKey
	s.l.enter(key)
	defer s.l.exit(key)
	if s.delay > 0 {
		t := time.NewTimer(s.delay) // the activity's own work
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
	return n + 1, nil
}

func (s *stepFlow) Flow(ctx workflow.Context, n int) (int, error) {
	for range 3 {
		var err error
		if n, err = workflow.ExecuteActivity(ctx, s.Step, n).Get(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func (s *stepFlow) register(t testing.TB, e *engine.Engine) {
	require.NoError(t, engine.RegisterWorkflow(e, s.Flow, engine.WorkflowOptions{Name: "StepFlow"}))
	require.NoError(t, engine.RegisterActivity(e, s.Step, activity.Options{Name: "Step"}))
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestRestartFinishesRunsWithoutRerunningActivities(t *testing.T) {
	t.Parallel()
	pool1, url := pgtest.PoolURL(t)
	ctx := resultCtx(t)
	flow := &stepFlow{l: newLedger(), delay: 5 * time.Millisecond}

	e1 := newEngine(t, pool1, engine.Options{Queues: map[string]engine.QueueOptions{"default": {WorkflowConcurrency: 4, ActivityConcurrency: 4}}})
	flow.register(t, e1)
	const runs = 40
	var handles []*engine.Run[int]
	for i := range runs {
		r, err := engine.Start(ctx, e1, flow.Flow, i*10, engine.StartOptions{ID: fmt.Sprintf("restart-%d", i)})
		require.NoError(t, err)
		handles = append(handles, r)
	}
	ctx1, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e1.Run(ctx1) }()
	require.Eventually(t, func() bool { return flow.l.total.Load() >= runs }, 20*time.Second, time.Millisecond,
		"the first engine gets part of the way")
	stop()
	require.NoError(t, <-done)
	firstEngine := flow.l.total.Load()
	require.Less(t, firstEngine, int64(3*runs), "the first engine was stopped in the middle")

	// A new engine on a new pool picks everything up.
	e2 := newEngine(t, newPool(t, url), engine.Options{})
	flow.register(t, e2)
	run(t, e2)
	for i, r := range handles {
		got, err := r.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, i*10+3, got)
	}
	flow.l.mu.Lock()
	defer flow.l.mu.Unlock()
	require.Len(t, flow.l.runs, 3*runs)
	for key, n := range flow.l.runs {
		require.Equal(t, 1, n, "activity %s ran %d times", key, n)
	}
}

func TestTwoEnginesNeverShareATask(t *testing.T) {
	t.Parallel()
	pool1, url := pgtest.PoolURL(t)
	ctx := resultCtx(t)
	flow := &stepFlow{l: newLedger(), delay: time.Millisecond}

	watch := newTaskWatch()
	var engines []*engine.Engine
	for id, pool := range map[string]*pgxpool.Pool{"a": pool1, "b": newPool(t, url)} {
		e, err := engine.NewWrapped(pool, engine.Options{WorkerID: id, Logger: quietLogger(), PollInterval: time.Second}, watch.wrap(id))
		require.NoError(t, err)
		engines = append(engines, e)
	}
	for _, e := range engines {
		flow.register(t, e)
	}
	const runs = 300
	var handles []*engine.Run[int]
	for i := range runs {
		r, err := engine.Start(ctx, engines[i%2], flow.Flow, i, engine.StartOptions{})
		require.NoError(t, err)
		handles = append(handles, r)
	}

	for _, e := range engines {
		run(t, e)
	}
	for i, r := range handles {
		got, err := r.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, i+3, got)
	}
	tasks, taskOverlaps := watch.counts()
	// Four tasks a run, one fewer if its first activity ran ahead of its
	// schedule and committed with it.
	require.GreaterOrEqual(t, tasks, 3*runs, "every run needs at least three workflow tasks")
	require.Zero(t, taskOverlaps, "no workflow task ran on both engines at once")
	flow.l.mu.Lock()
	defer flow.l.mu.Unlock()
	require.Zero(t, flow.l.overlaps, "no activity attempt ran on both engines at once")
	require.Len(t, flow.l.runs, 3*runs)
	for key, n := range flow.l.runs {
		require.Equal(t, 1, n, "activity %s ran %d times", key, n)
	}
}

// Starts racing with Run's shutdown hand their first task to the stopping
// engine or leave it ready, never claimed by an engine that will not run
// it: a second engine finishes them all well before any lease runs out.
func TestStartsDuringShutdownAreNotStranded(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.PoolURL(t)
	ctx := resultCtx(t)
	const lease = time.Hour // a stranded task would wait this long
	e1 := newEngine(t, pool, engine.Options{WorkflowTaskLease: lease})
	registerPipeline(t, e1)
	ctx1, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- e1.Run(ctx1) }()

	var handles []*engine.Run[string]
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				r, err := engine.Start(ctx, e1, Pipeline, i, engine.StartOptions{ID: fmt.Sprintf("shutdown-%d-%d", w, i)})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				handles = append(handles, r)
				mu.Unlock()
				if w == 0 && i == 20 {
					stop() // shut down while the others keep starting
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, <-done)

	e2 := newEngine(t, newPool(t, url), engine.Options{WorkflowTaskLease: lease})
	registerPipeline(t, e2)
	run(t, e2)
	for _, r := range handles {
		_, err := r.Result(ctx)
		require.NoError(t, err, "run %s", r.WorkflowID)
	}
}
