package engine_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/workflow"
)

// AwaitGo waits for the signal "go" and returns n plus its value.
func AwaitGo(ctx workflow.Context, n int) (int, error) {
	v, err := workflow.GetSignalChannel[int](ctx, "go").Receive(ctx)
	return n + v, err
}

// A Result in an engine other than the one that started the run says so
// before it waits, and the starter, closing the run, then announces the
// close. The backstop poll is an hour away: only the notification can end
// the wait.
func TestResultInAnotherEngineIsNotifiedOfTheClose(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.PoolURL(t)
	ctx := resultCtx(t)
	worker := newEngine(t, pool, engine.Options{PollInterval: time.Hour})
	require.NoError(t, engine.RegisterWorkflow(worker, AwaitGo, engine.WorkflowOptions{}))
	run(t, worker)
	mine, err := engine.Start(ctx, worker, AwaitGo, 1, engine.StartOptions{ID: "awaited"})
	require.NoError(t, err)

	client := newEngine(t, newPool(t, url), engine.Options{PollInterval: time.Hour})
	theirs, err := engine.GetRun[int](ctx, client, "awaited")
	require.NoError(t, err)
	got := make(chan int, 1)
	go func() {
		v, err := theirs.Result(ctx)
		if err != nil {
			v = -1
		}
		got <- v
	}()
	require.Eventually(t, func() bool {
		var waiter string
		err := pool.QueryRow(ctx, "SELECT coalesce(waiter, '') FROM durable_runs WHERE run_id = $1", mine.RunID).Scan(&waiter)
		return err == nil && waiter == "*"
	}, 10*time.Second, time.Millisecond, "the client says it waits")

	require.NoError(t, engine.Signal(ctx, worker, "awaited", "go", 2))
	select {
	case v := <-got:
		require.Equal(t, 3, v)
	case <-time.After(10 * time.Second):
		t.Fatal("the other engine's Result was not told of the close")
	}
	v, err := mine.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, v, "the starter's own Result")
}

// A run that closes on the engine that started it, with no one else
// waiting, is not announced to other processes: that engine hands the
// outcome to its own waiters.
func TestOwnClosesAreNotAnnounced(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN "+postgres.NotifyChannel)
	require.NoError(t, err)

	e := newEngine(t, pool, engine.Options{PollInterval: time.Hour})
	require.NoError(t, engine.RegisterWorkflow(e, Echo, engine.WorkflowOptions{}))
	run(t, e)
	r, err := engine.Start(ctx, e, Echo, "seven", engine.StartOptions{})
	require.NoError(t, err)
	v, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "seven", v)

	// A start on a queue no one here serves is announced after the close
	// would have been: its notification ends what we read.
	_, err = engine.Start(ctx, e, Echo, "eight", engine.StartOptions{Queue: "nobody-here"})
	require.NoError(t, err)
	var seen []string
	for !slices.Contains(seen, "w:nobody-here") {
		n, err := listener.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		seen = append(seen, n.Payload)
	}
	for _, p := range seen { // "c:<run>", with its outcome after a newline
		require.NotEqual(t, "c:"+r.RunID, strings.SplitN(p, "\n", 2)[0], "notifications sent: %v", seen)
	}
}
