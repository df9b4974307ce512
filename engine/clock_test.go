package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/workflow"
)

// clockWatch counts what a skewed engine's scanner and pollers did.
type clockWatch struct {
	store.Store
	looks     atomic.Int64 // the scanner's looks at the next timer
	fired     atomic.Int64 // timers its fires fired
	actClaims atomic.Int64 // its claims of activity tasks, whatever they found
	actsTaken atomic.Int64 // activity tasks they claimed
}

func (w *clockWatch) NextTimer(ctx context.Context, skip []string) (time.Time, bool, error) {
	at, ok, err := w.Store.NextTimer(ctx, skip)
	w.looks.Add(1)
	return at, ok, err
}

func (w *clockWatch) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	f, tasks, err := w.Store.FireTimers(ctx, in)
	w.fired.Add(int64(f.Count))
	return f, tasks, err
}

func (w *clockWatch) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	tasks, err := w.Store.ClaimActivityTasks(ctx, in)
	w.actsTaken.Add(int64(len(tasks)))
	w.actClaims.Add(1)
	return tasks, err
}

// skewedEngine returns an engine on pool whose process clock is skew
// ahead, watched by w if it is set.
func skewedEngine(t *testing.T, pool *pgxpool.Pool, skew time.Duration, w *clockWatch) *Engine {
	t.Helper()
	o := Options{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond,
		osNowFunc: func() time.Time { return time.Now().Add(skew) }}
	var wrap func(store.Store) store.Store
	if w != nil {
		wrap = func(s store.Store) store.Store { w.Store = s; return w }
	}
	e, err := newOnPool(pool, o, wrap)
	require.NoError(t, err)
	return e
}

func napHalfHour(ctx workflow.Context, n int) (int, error) {
	return n, workflow.Sleep(ctx, 30*time.Minute)
}

// A worker whose clock is an hour ahead does not fire a 30-minute timer
// early (#28): timers are due by the database's clock.
func TestSkewedWorkerDoesNotFireTimersEarly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	right := skewedEngine(t, pool, 0, nil)
	require.NoError(t, RegisterWorkflow(right, napHalfHour, WorkflowOptions{}))
	runUntilTestEnds(t, right)
	r, err := Start(ctx, right, napHalfHour, 1, StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := right.Describe(ctx, r.WorkflowID)
		return err == nil && len(d.PendingTimers) == 1
	}, 10*time.Second, 5*time.Millisecond, "the run sleeps")

	w := &clockWatch{}
	ahead := skewedEngine(t, pool, time.Hour, w)
	require.NoError(t, RegisterWorkflow(ahead, napHalfHour, WorkflowOptions{}))
	runUntilTestEnds(t, ahead)
	// Each round of the scanner looks at the next timer once; a fire in the
	// first round is over by the third.
	require.Eventually(t, func() bool { return w.looks.Load() >= 3 }, 10*time.Second, time.Millisecond,
		"the skewed engine's scanner looks three times")
	require.Zero(t, w.fired.Load(), "the skewed engine fired a timer that is not due")
	d, err := right.Describe(ctx, r.WorkflowID)
	require.NoError(t, err)
	require.Len(t, d.PendingTimers, 1, "the run still sleeps")
}

// The activity of the lease test: it counts its calls, says it started
// and holds until released.
var (
	leasedCalls   atomic.Int64
	leasedStarted = make(chan struct{}, 1)
	leasedRelease = make(chan struct{})
	leasedOnce    sync.Once
)

func leased(ctx context.Context, n int) (int, error) {
	leasedCalls.Add(1)
	select {
	case leasedStarted <- struct{}{}:
	default:
	}
	select {
	case <-leasedRelease:
		return n + 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// leaseSkew is how far ahead the skewed worker's clock is: twice the
// lease of leased, so that a worker's clock would take the live claim at
// once, and the lease is long enough that the claim is still live when the
// skewed worker starts on a loaded machine.
const leaseSkew = 10 * time.Second

func leasedOnceWF(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, activity.Options{StartToCloseTimeout: leaseSkew / 2})
	return workflow.ExecuteActivity(ctx, leased, n).Get(ctx)
}

// A worker whose clock is 10 seconds ahead does not take a live claim of
// an activity (#28): leases are measured by the database's clock, so the
// activity runs once.
func TestSkewedWorkerDoesNotTakeALiveClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(e *Engine) {
		require.NoError(t, RegisterWorkflow(e, leasedOnceWF, WorkflowOptions{}))
		require.NoError(t, RegisterActivity(e, leased, activity.Options{}))
	}
	right := skewedEngine(t, pool, 0, nil)
	register(right)
	runUntilTestEnds(t, right)
	defer leasedOnce.Do(func() { close(leasedRelease) })
	r, err := Start(ctx, right, leasedOnceWF, 1, StartOptions{})
	require.NoError(t, err)
	select {
	case <-leasedStarted:
	case <-ctx.Done():
		t.Fatal("the activity did not start")
	}
	began := time.Now()

	w := &clockWatch{}
	ahead := skewedEngine(t, pool, leaseSkew, w)
	register(ahead)
	runUntilTestEnds(t, ahead)
	require.Eventually(t, func() bool { return w.actClaims.Load() >= 1 }, 10*time.Second, time.Millisecond,
		"the skewed engine claims activity tasks")
	require.Less(t, time.Since(began), leaseSkew/2, "the skewed engine claimed while the lease held")
	require.Zero(t, w.actsTaken.Load(), "the skewed engine took the live claim")
	leasedOnce.Do(func() { close(leasedRelease) })
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Equal(t, int64(1), leasedCalls.Load(), "the activity ran once")
}
