package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// A close that commits alone sends its notice in its own transaction, if
// it took effect and its run's waiter is not the closing engine; grouped
// with other writes it leaves the notice to its engine.
func TestCloseAloneCarriesItsNotice(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	s := postgres.New(pool)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	runs, acts := runsWithClaimedActivity(t, s, now, 5)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+postgres.NotifyChannel)
	require.NoError(t, err)
	next := func() string {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}
	result := json.RawMessage(`{"n":7}`)
	closing := func(i int, act store.ActivityTask) store.CommitWorkflowTaskParams {
		c := fusedStep(runs[i], act, now, history.WorkflowCompleted{Result: result})
		c.Close = &store.CloseRun{Status: store.StatusCompleted, Result: result}
		c.Notice, c.NoticeSkip = "c:"+runs[i]+"\n{\"s\":\"completed\",\"r\":{\"n\":7}}", "engine-a"
		return c
	}
	alone := func(c store.CommitWorkflowTaskParams) (store.Ready, error) {
		ready, errs, _ := together(t, s, []store.CommitWorkflowTaskParams{c}, s.CommitWorkflowTask)
		return ready[0], errs[0]
	}

	stale := acts[0]
	stale.Attempt++
	ready, err := alone(closing(0, stale))
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.False(t, ready.Noticed, "a close that did not happen is not announced")

	_, err = s.WatchRun(ctx, runs[1]) // waiter "*": another engine waits
	require.NoError(t, err)
	ready, err = alone(closing(1, acts[1]))
	require.NoError(t, err)
	require.True(t, ready.Noticed)
	require.Equal(t, "c:"+runs[1]+"\n{\"s\":\"completed\",\"r\":{\"n\":7}}", next(), "the first notice is run 1's: none for the refused close")

	grouped, errs, _ := together(t, s, []store.CommitWorkflowTaskParams{closing(2, acts[2]), closing(3, acts[3])}, s.CommitWorkflowTask)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.False(t, grouped[0].Noticed, "grouped closes leave their notices to their engines")
	require.False(t, grouped[1].Noticed)

	// Without group commit the store ignores the notice.
	ready, err = postgres.New(pool).CommitWorkflowTask(ctx, closing(4, acts[4]))
	require.NoError(t, err)
	require.False(t, ready.Noticed)

	// A run whose waiter is the closing engine needs no notice.
	own, err := s.CreateRun(ctx, store.CreateRunParams{RunID: "00000000-0000-4000-8000-000000000001", WorkflowID: "own",
		WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: now, Waiter: "engine-a"})
	require.NoError(t, err)
	wt, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, wt, 1)
	c := store.CommitWorkflowTaskParams{RunID: own.RunID, Token: wt[0].Token, ProcessedEventID: 1, Now: now,
		Events: []history.Attributes{history.WorkflowCompleted{Result: result}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: result},
		Notice: "c:" + own.RunID, NoticeSkip: "engine-a"}
	ready, err = alone(c)
	require.NoError(t, err)
	require.False(t, ready.Noticed)

	// A sentinel: the next notice is its, none came in between.
	_, err = s.WatchRun(ctx, runs[0])
	require.NoError(t, err)
	ready, err = alone(closing(0, acts[0]))
	require.NoError(t, err)
	require.True(t, ready.Noticed)
	require.Equal(t, "c:"+runs[0]+"\n{\"s\":\"completed\",\"r\":{\"n\":7}}", next())
}
