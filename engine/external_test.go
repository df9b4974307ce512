package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// mutexRig is Temporal's mutex sample: holders ask a mutex workflow for a
// lock with SignalWithStart (from an activity), the mutex grants it with
// SignalExternalWorkflow, and each holder releases it the same way.
type mutexRig struct {
	e            *engine.Engine
	inside, most atomic.Int32
	mu           sync.Mutex
	order        []string
}

// Mutex grants the lock n times, one holder at a time.
func (m *mutexRig) Mutex(ctx workflow.Context, n int) (int, error) {
	acquire := workflow.GetSignalChannel[string](ctx, "acquire")
	release := workflow.GetSignalChannel[string](ctx, "release")
	for i := range n {
		holder, err := acquire.Receive(ctx)
		if err != nil {
			return i, err
		}
		if _, err := workflow.SignalExternalWorkflow(ctx, holder, "", "granted", i).Get(ctx); err != nil {
			return i, err
		}
		if _, err := release.Receive(ctx); err != nil {
			return i, err
		}
	}
	return n, nil
}

// RequestLock asks the mutex for the lock on behalf of the calling
// workflow, starting the mutex if it is not running.
func (m *mutexRig) RequestLock(ctx context.Context, n int) (string, error) {
	me := activity.GetInfo(ctx).WorkflowID
	_, err := engine.SignalWithStart(ctx, m.e, m.Mutex, n, engine.StartOptions{ID: "mutex"}, "acquire", me)
	return me, err
}

// Critical is the work done under the lock; it records how many run at once.
func (m *mutexRig) Critical(_ context.Context, who string) (int, error) {
	now := m.inside.Add(1)
	defer m.inside.Add(-1)
	for {
		most := m.most.Load()
		if now <= most || m.most.CompareAndSwap(most, now) {
			break
		}
	}
	m.mu.Lock()
	m.order = append(m.order, who)
	m.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // the work, during which another holder would overlap
	return 0, nil
}

// Holder takes the lock, works, and releases it.
func (m *mutexRig) Holder(ctx workflow.Context, n int) (int, error) {
	me, err := workflow.ExecuteActivity(ctx, m.RequestLock, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	turn, err := workflow.GetSignalChannel[int](ctx, "granted").Receive(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := workflow.ExecuteActivity(ctx, m.Critical, me).Get(ctx); err != nil {
		return 0, err
	}
	_, err = workflow.SignalExternalWorkflow(ctx, "mutex", "", "release", me).Get(ctx)
	return turn, err
}

func TestMutexWithSignalWithStartAndSignalExternalWorkflow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	m := &mutexRig{}
	m.e = newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(m.e, m.Mutex, engine.WorkflowOptions{Name: "Mutex"}))
	require.NoError(t, engine.RegisterWorkflow(m.e, m.Holder, engine.WorkflowOptions{Name: "Holder"}))
	require.NoError(t, engine.RegisterActivity(m.e, m.RequestLock, activity.Options{Name: "RequestLock"}))
	require.NoError(t, engine.RegisterActivity(m.e, m.Critical, activity.Options{Name: "Critical"}))
	run(t, m.e)
	ctx := resultCtx(t)
	const holders = 3
	runs := make([]*engine.Run[int], holders)
	for i := range runs {
		var err error
		runs[i], err = engine.Start(ctx, m.e, m.Holder, holders, engine.StartOptions{ID: fmt.Sprintf("holder-%d", i)})
		require.NoError(t, err)
	}
	turns := map[int]bool{}
	for _, r := range runs {
		turn, err := r.Result(ctx)
		require.NoError(t, err)
		turns[turn] = true
	}
	require.Len(t, turns, holders, "each holder had a turn of its own")
	mutex, err := engine.GetRun[int](ctx, m.e, "mutex")
	require.NoError(t, err)
	n, err := mutex.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, holders, n)
	require.Equal(t, int32(1), m.most.Load(), "never two holders in the critical section")
	for i := range runs {
		require.NoError(t, m.e.ReplayRun(ctx, fmt.Sprintf("holder-%d", i)))
	}
	require.NoError(t, m.e.ReplayRun(ctx, "mutex"))
	events, err := runs[0].History(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "external_signal_scheduled"), "the release is recorded once")
	require.Equal(t, 1, countEvents(t, events, "external_request_completed"))
}

// Controller signals its child, cancels another workflow, and signals one
// that does not exist.
func Controller(ctx workflow.Context, _ int) (string, error) {
	child := workflow.ExecuteChildWorkflow(ctx, Collect, 1, workflow.ChildOptions{ID: "controlled-child"})
	if _, err := workflow.SignalChildWorkflow(ctx, child, "item", "from-parent").Get(ctx); err != nil {
		return "", err
	}
	if err := workflow.Sleep(ctx, 2*time.Hour); err != nil { // Collect sleeps an hour first
		return "", err
	}
	got, err := child.Get(ctx)
	if err != nil {
		return "", err
	}
	if _, err := workflow.RequestCancelExternalWorkflow(ctx, "to-cancel", "", "no longer needed").Get(ctx); err != nil {
		return "", err
	}
	_, err = workflow.SignalExternalWorkflow(ctx, "nobody", "", "item", "lost").Get(ctx)
	var ee *workflow.ExternalWorkflowError
	if !errors.As(err, &ee) {
		return "", fmt.Errorf("signal to nobody: %v", err)
	}
	return got + "; " + ee.Error(), nil
}

func TestSignalAndCancelFromWorkflowCode(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Controller, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, Collect, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(env.Engine, WaitsForever, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	victim, err := engine.Start(ctx, env.Engine, WaitsForever, 0, engine.StartOptions{ID: "to-cancel"})
	require.NoError(t, err)
	r, err := engine.Start(ctx, env.Engine, Controller, 0, engine.StartOptions{ID: "controller"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := env.Engine.Describe(ctx, "controlled-child")
		return err == nil && len(info.PendingTimers) == 1
	}, 10*time.Second, 5*time.Millisecond, "the child sleeps")
	require.NoError(t, env.Advance(ctx, 2*time.Hour))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, `from-parent; workflow nobody: no run is open`, got)
	info, err := victim.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusCanceled, info.Status, "the cancel request reached the other workflow")
	require.NoError(t, env.Engine.ReplayRun(ctx, "controller"))
}
