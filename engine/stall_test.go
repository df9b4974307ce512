package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/workflow"
)

// heldClaims is a store whose next activity claim, once armed, holds its
// poller (and the slots it reserved) until released: the poller is
// claiming just when a start hands its activity off.
type heldClaims struct {
	store.Store
	mu      sync.Mutex
	armed   bool
	holding chan struct{} // closed when the armed claim is held
	release chan struct{}
}

func (s *heldClaims) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.holding, s.release = true, make(chan struct{}), make(chan struct{})
}

func (s *heldClaims) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	s.mu.Lock()
	held := s.armed
	s.armed = false
	holding, release := s.holding, s.release
	s.mu.Unlock()
	if held {
		close(holding)
		<-release
	}
	return s.Store.ClaimActivityTasks(ctx, in)
}

func Quick(context.Context, int) (int, error) { return 1, nil }

func OneQuick(ctx workflow.Context, n int) (int, error) {
	return workflow.ExecuteActivity(ctx, Quick, n).Get(ctx)
}

// A start whose activity finds every free slot held by the poller's claim
// puts the activity in the engine's backlog, held back from other engines
// for a second. The poller must take it as soon as its claim returns, not
// sleep until the hold ends: that was a one-second stall of about one W2
// round trip in a few hundred (the performance issue's W2 max of 1,006 ms).
func TestBackloggedActivityIsClaimedWithoutWaitingOutTheHold(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	held := &heldClaims{}
	e, err := engine.NewWrapped(pgtest.Pool(t), engine.Options{
		Logger: quietLogger(), PollInterval: 2 * time.Second, // longer than the hold: the stall shows whole
		Queues: map[string]engine.QueueOptions{engine.DefaultQueue: {ActivityConcurrency: 1}},
	}, func(s store.Store) store.Store { held.Store = s; return held })
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, OneQuick, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Quick, activity.Options{}))
	run(t, e)

	// A first round trip, so that the poller sleeps between claims.
	r, err := engine.Start(ctx, e, OneQuick, 0, engine.StartOptions{})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.NoError(t, err)

	held.arm() // the poller's next claim, at its next poll, holds
	select {
	case <-held.holding:
	case <-ctx.Done():
		t.Fatal("the poller did not claim")
	}
	began := time.Now()
	r, err = engine.Start(ctx, e, OneQuick, 1, engine.StartOptions{}) // its activity finds no free slot
	require.NoError(t, err)
	close(held.release)
	_, err = r.Result(ctx)
	require.NoError(t, err)
	require.Less(t, time.Since(began), 500*time.Millisecond, "the backlogged activity waited out the hold")
}
