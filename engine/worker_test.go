package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
)

// An activity that ignores cancellation does not hold Run up: Run returns
// about ShutdownTimeout after its context is done, its claim given back.
// Go cannot stop the activity's goroutine, which runs on; the result it
// returns late is not recorded, and the job runs again on another worker.
func TestRunReturnsWhileAnActivityIgnoresCancellation(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	stubborn := func(context.Context, int) (int, error) {
		close(entered)
		<-release // deaf to its context
		return 1, nil
	}
	opts := activity.Options{Name: "Stubborn"}
	logs := &syncbuf.Buffer{}
	w := newEngine(t, pool, engine.Options{
		ShutdownTimeout: 200 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, engine.RegisterActivity(w, stubborn, opts))
	job, err := engine.Enqueue(ctx, w, stubborn, 1, engine.JobOptions{})
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	t.Cleanup(func() { stop(); letGo() }) // whatever failed, the goroutines end
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the worker did not start the job")
	}
	stop()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Run did not return within 5s of its 200ms ShutdownTimeout while an activity ignores cancellation")
	}

	task := func() (lockedBy *string, attempt int, found bool, err error) {
		err = pool.QueryRow(ctx, `SELECT locked_by, attempt FROM durable_activity_tasks WHERE id = $1`, job.ID).Scan(&lockedBy, &attempt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, 0, false, nil
		}
		return lockedBy, attempt, err == nil, err
	}
	lockedBy, attempt, found, err := task()
	require.NoError(t, err)
	require.True(t, found, "the job is still to do")
	require.Nil(t, lockedBy, "Run gave the job's claim back")
	require.Equal(t, 1, attempt)

	letGo() // the activity returns its result, late
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "activity returned a result after shutdown cancelled it")
	}, 10*time.Second, 5*time.Millisecond, "the late result is seen and refused")
	lockedBy, attempt, found, err = task()
	require.NoError(t, err)
	require.True(t, found, "the late result did not complete the job")
	require.Nil(t, lockedBy)
	require.Equal(t, 1, attempt)

	w2 := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterActivity(w2, Add, opts))
	run(t, w2)
	require.Eventually(t, func() bool {
		_, _, found, err := task()
		return err == nil && !found
	}, 10*time.Second, 5*time.Millisecond, "another worker runs the job again")
}
