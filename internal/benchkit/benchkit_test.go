package benchkit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 200)
	for i := range ds {
		ds[i] = time.Duration(i+1) * time.Millisecond
	}
	require.Equal(t, 100*time.Millisecond, Quantile(ds, 0.5))
	require.Equal(t, 198*time.Millisecond, Quantile(ds, 0.99))
	require.Equal(t, time.Duration(0), Quantile(nil, 0.5))
	require.Equal(t, time.Millisecond, Quantile(ds[:1], 0.99))
}

func TestParseBusy(t *testing.T) {
	t.Parallel()
	// user nice system idle iowait irq softirq steal guest guest_nice
	require.Equal(t, (1+2+3+6+7+8)*10*time.Millisecond, parseBusy("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	require.Zero(t, parseBusy("intr 1 2 3"), "not the cpu line")
	require.Zero(t, parseBusy("cpu 1 2 x 4 5 6 7 8 0 0"), "a field that is not a number")
}

// Every run is started once and waited for once; its latency is counted.
func TestOpenLoopStartsAndWaitsForEveryRun(t *testing.T) {
	t.Parallel()
	const n = 500
	var started, waited [n]atomic.Int32
	lp, err := OpenLoop(t.Context(), n, 8, func(_ context.Context, i int) (func(context.Context) error, error) {
		started[i].Add(1)
		return func(context.Context) error {
			time.Sleep(time.Millisecond) // the run's work, not synchronisation
			waited[i].Add(1)
			return nil
		}, nil
	})
	require.NoError(t, err)
	for i := range n {
		require.EqualValues(t, 1, started[i].Load(), "run %d started", i)
		require.EqualValues(t, 1, waited[i].Load(), "run %d waited for", i)
	}
	require.Len(t, lp.Lat, n)
	for _, d := range lp.Lat {
		require.GreaterOrEqual(t, d, time.Millisecond)
	}
	require.GreaterOrEqual(t, lp.Span, lp.Started)
	require.GreaterOrEqual(t, lp.Span, time.Millisecond)
}

// The first error, from a start or a wait, stops the loop and is returned.
func TestOpenLoopStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var starts atomic.Int32
	_, err := OpenLoop(t.Context(), 100_000, 4, func(_ context.Context, i int) (func(context.Context) error, error) {
		starts.Add(1)
		if i == 10 {
			return nil, boom
		}
		return func(context.Context) error { return nil }, nil
	})
	require.ErrorIs(t, err, boom)
	require.Less(t, starts.Load(), int32(100_000), "the loop stopped feeding runs")

	_, err = OpenLoop(t.Context(), 20, 4, func(_ context.Context, i int) (func(context.Context) error, error) {
		return func(context.Context) error {
			if i == 3 {
				return boom
			}
			return nil
		}, nil
	})
	require.ErrorIs(t, err, boom)
}

// Commits counts a database's transactions, those of clients that have
// just disconnected included.
func TestCommits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.EmptyDatabase(t)
	admin, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer admin.Close(context.Background())

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var name string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	require.NoError(t, conn.Close(ctx))

	c0, err := Commits(ctx, admin, name)
	require.NoError(t, err)
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	for range 5 {
		_, err := conn.Exec(ctx, "SELECT 1")
		require.NoError(t, err)
	}
	// A client still connected may hold its counts: Commits waits for it.
	// It is cut short on a connection of its own: a deadline that strikes
	// while a query runs closes the connection.
	probe, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer probe.Close(context.Background())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = Commits(short, probe, name)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "Commits returned while a client was connected")
	require.NoError(t, conn.Close(ctx))
	c1, err := Commits(ctx, admin, name)
	require.NoError(t, err)
	require.GreaterOrEqual(t, c1-c0, int64(5), "the five statements' transactions")
	require.LessOrEqual(t, c1-c0, int64(10), "nothing else ran")
}
