package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// TestClaimPlannedOnAnEmptyTableLooksUpItsPreferredTasks: a claim planned
// while the activity table was empty (a quiet queue that was just
// vacuumed, as connections often are when an engine starts) and run once
// the table holds thousands of tasks looks its preferred tasks up one by
// one. It once walked the whole (run_id, seq) index and matched each entry
// against the preferred keys: 42 ms at 20,000 tasks instead of 0.15 ms,
// for as long as the connection kept the plan. Index entries read, not time,
// tell the two apart.
func TestClaimPlannedOnAnEmptyTableLooksUpItsPreferredTasks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `VACUUM ANALYZE durable_activity_tasks`)
	require.NoError(t, err)

	now := time.Now().UTC().Truncate(time.Microsecond)
	in := store.ClaimParams{Queue: "q", Now: now, Limit: 10, WorkerID: "w", PreferEarly: time.Second}
	// claim runs the claim as the store does, in a transaction with the
	// store's planner settings, and leaves the transaction open.
	claim := func() (pgx.Tx, pgconn.CommandTag) {
		sql, args, err := postgres.ClaimActivityStatement(in)
		require.NoError(t, err)
		_, err = conn.Conn().Prepare(ctx, "claim", sql) // once: the same name and SQL again is a no-op
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, postgres.IndexPlans)
		require.NoError(t, err)
		tag, err := tx.Exec(ctx, "claim", args...)
		require.NoError(t, err)
		return tx, tag
	}
	tx, tag := claim() // planned now, on the empty table
	require.NoError(t, tx.Commit(ctx))

	const others = 5000 // claimed by other workers: not ready
	_, err = conn.Exec(ctx, `INSERT INTO durable_activity_tasks (run_id, seq, activity, queue, input, idempotency_key,
            lease_ms, run_after, created_at, attempt, locked_by, locked_until)
        SELECT gen_random_uuid(), 1, 'A', 'q', '0', 'other-' || g, 60000, $1::timestamptz + interval '1 minute', $1, 1, 'x',
            $1::timestamptz + interval '1 minute'
        FROM generate_series(1, $2::int) g`, now, others)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `INSERT INTO durable_activity_tasks (run_id, seq, activity, queue, input, idempotency_key,
            lease_ms, run_after, created_at)
        SELECT gen_random_uuid(), 1, 'A', 'q', '0', 'mine-' || g, 60000, $1::timestamptz + interval '500 milliseconds', $1
        FROM generate_series(1, 10) g
        RETURNING run_id::text, seq`, now)
	require.NoError(t, err)
	for rows.Next() {
		var k store.ActivityKey
		require.NoError(t, rows.Scan(&k.RunID, &k.Seq))
		in.Prefer = append(in.Prefer, k)
	}
	require.NoError(t, rows.Err())

	// The plan made on the empty table; the transaction's statistics count
	// the claim's index reads alone.
	tx, tag = claim()
	defer tx.Rollback(ctx)
	require.EqualValues(t, 10, tag.RowsAffected(), "the claim takes the ten preferred tasks")
	var read int
	require.NoError(t, tx.QueryRow(ctx, `SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))::int
        FROM pg_index WHERE indrelid = 'durable_activity_tasks'::regclass`).Scan(&read))
	require.Less(t, read, 200, "index entries read to claim 10 of %d tasks: the claim walked an index", others+10)
}

// TestNotRunningPlannedOnAnEmptyTableLooksUpEachRun: Result's backstop,
// planned while the runs table was empty and run once it holds thousands of
// running runs, looks each run up by its key. Planned naively, it walked
// every running run through durable_runs_status, for each ID asked about.
func TestNotRunningPlannedOnAnEmptyTableLooksUpEachRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	s := postgres.New(pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `VACUUM ANALYZE durable_runs`)
	require.NoError(t, err)
	// notRunning asks as the store does, with its planner settings, in a
	// transaction it leaves open (the same connection keeps the plan).
	notRunning := func(ids []string) ([]string, pgx.Tx) {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, postgres.IndexPlans)
		require.NoError(t, err)
		gone, err := s.WithTx(tx).NotRunning(ctx, ids)
		require.NoError(t, err)
		return gone, tx
	}
	gone, tx := notRunning([]string{"00000000-0000-0000-0000-000000000001"}) // planned now, on the empty table
	require.Len(t, gone, 1)
	require.NoError(t, tx.Commit(ctx))

	const others = 5000 // running runs nobody asks about
	insert := func(n int, status string) []string {
		rows, err := conn.Query(ctx, `INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input,
                created_at, updated_at, closed_at)
            SELECT gen_random_uuid(), gen_random_uuid()::text, 'W', 'q', $2, '0', now(), now(),
                CASE WHEN $2 = 'running' THEN NULL ELSE now() END
            FROM generate_series(1, $1::int) g
            RETURNING run_id::text`, n, status)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	insert(others, "running")
	running, closed := insert(5, "running"), insert(5, "completed")

	// The plan made on the empty table; the transaction's statistics count
	// this statement's index reads alone.
	gone, tx = notRunning(append(running, closed...))
	defer tx.Rollback(ctx)
	require.ElementsMatch(t, closed, gone)
	var read int
	require.NoError(t, tx.QueryRow(ctx, `SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))::int
        FROM pg_index WHERE indrelid = 'durable_runs'::regclass`).Scan(&read))
	require.Less(t, read, 100, "index entries read to ask about 10 of %d running runs: it walked an index", others+5)
}
