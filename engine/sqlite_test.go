package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// Remind sleeps, then has its activity greet.
func Remind(ctx workflow.Context, name string) (string, error) {
	if err := workflow.Sleep(ctx, 300*time.Millisecond); err != nil {
		return "", err
	}
	return workflow.ExecuteActivity(ctx, SayHello, name).Get(ctx)
}

func SayHello(_ context.Context, name string) (string, error) { return "hello " + name, nil }

// openSQLite opens an engine on the SQLite file at path with Remind and
// SayHello registered.
func openSQLite(t *testing.T, path string) *engine.Engine {
	t.Helper()
	e, err := engine.Open(t.Context(), path, engine.Options{Logger: quietLogger(), PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, Remind, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, SayHello, activity.Options{}))
	return e
}

// An engine opened on a SQLite file runs a workflow end to end with
// nothing but the file; closed while the run sleeps and opened again on
// the file, it finishes the same run.
func TestOpenSQLiteResumesAfterAStop(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "durable.db")
	ctx := resultCtx(t)

	e1 := openSQLite(t, path)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e1.Run(runCtx) }()
	r, err := engine.Start(ctx, e1, Remind, "ada", engine.StartOptions{ID: "remind-ada"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := e1.Describe(ctx, "remind-ada")
		return err == nil && len(d.PendingTimers) == 1
	}, 10*time.Second, time.Millisecond, "the run sleeps")
	stop()
	require.NoError(t, <-done)
	require.NoError(t, e1.Close())

	e2 := openSQLite(t, path)
	t.Cleanup(func() { require.NoError(t, e2.Close()) })
	run(t, e2)
	again, err := engine.GetRun[string](ctx, e2, "remind-ada")
	require.NoError(t, err)
	require.Equal(t, r.RunID, again.RunID, "the same run")
	got, err := again.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello ada", got)
}

// The calls that take a pgx.Tx say, on a SQLite engine, that they need
// PostgreSQL.
func TestPostgresTxCallsOnSQLiteSaySo(t *testing.T) {
	t.Parallel()
	e := openSQLite(t, filepath.Join(t.TempDir(), "durable.db"))
	t.Cleanup(func() { e.Close() })
	_, err := engine.StartTx(t.Context(), e, nil, Remind, "x", engine.StartOptions{})
	require.ErrorContains(t, err, "nil transaction")
	pool := pgtest.Pool(t) // a real pgx.Tx, of another database
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	err = engine.SignalTx(t.Context(), e, tx, "wf", "s", 1)
	require.ErrorContains(t, err, "PostgreSQL transaction")
}

// SQLiteTx: a start and the caller's own row commit together, or, when
// fn fails, neither exists; the run of a committed start runs.
func TestSQLiteTxStartsWithTheCallersRowsOrNotAtAll(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	e := openSQLite(t, filepath.Join(t.TempDir(), "durable.db"))
	t.Cleanup(func() { e.Close() })
	run(t, e)
	require.NoError(t, e.SQLiteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`)
		return err
	}))
	order := func(id string, fail error) error {
		return e.SQLiteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
				return err
			}
			if _, err := engine.StartSQLTx(ctx, e, tx, Remind, id, engine.StartOptions{ID: "order-" + id}); err != nil {
				return err
			}
			return fail
		})
	}
	boom := errors.New("boom")
	require.ErrorIs(t, order("lost", boom), boom)
	_, err := e.Describe(ctx, "order-lost")
	require.ErrorIs(t, err, engine.ErrRunNotFound, "the start rolled back with the order")

	require.NoError(t, order("kept", nil))
	r, err := engine.GetRun[string](ctx, e, "order-kept")
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello kept", got)
	var n int
	require.NoError(t, e.SQLiteTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	}))
	require.Equal(t, 1, n, "only the committed order")

	err = engine.SignalSQLTx(ctx, e, &sql.Tx{}, "order-kept", "s", 1)
	require.ErrorContains(t, err, "not one of this engine's SQLiteTx calls")
}
