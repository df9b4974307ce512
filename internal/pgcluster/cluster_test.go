package pgcluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/internal/pgcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestClusterStopStartTerminate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.New(ctx, pgcluster.Options{})
	require.NoError(t, err)
	dir := c.Dir()
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	url, err := c.CreateDatabase(ctx, "probe")
	require.NoError(t, err)
	exec := func() error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS t (x int); INSERT INTO t VALUES (1)")
		return err
	}
	require.NoError(t, exec())

	for _, mode := range []pgcluster.StopMode{pgcluster.Fast, pgcluster.Immediate} {
		require.NoError(t, c.Stop(ctx, mode))
		require.False(t, c.Running())
		require.Error(t, exec(), "the server is stopped (%s): connecting must fail", mode)
		require.Error(t, c.Stop(ctx, mode), "stopping a stopped server is an error")
		require.NoError(t, c.Start(ctx))
		require.NoError(t, exec(), "after a restart from %s shutdown", mode)
	}

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	// exec's last connection is closed, but its backend may still be on
	// its way out: wait until this one is the only one.
	require.Eventually(t, func() bool {
		var open int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'probe'").Scan(&open)
		return err == nil && open == 1
	}, 10*time.Second, 5*time.Millisecond, "the earlier connections to probe have gone")
	n, err := c.TerminateBackends(ctx, "probe", 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "one connection to probe was open")
	require.Error(t, conn.Ping(ctx), "the terminated connection must be dead")

	var rows int
	conn2, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn2.Close(context.Background())
	require.NoError(t, conn2.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&rows))
	require.Equal(t, 3, rows, "rows written before both shutdowns survive")

	require.NoError(t, c.Close())
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "Close removes the directory")
}
