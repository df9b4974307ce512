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
