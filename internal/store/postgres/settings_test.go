package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store/postgres"
)

// A workflow-task claim's transaction commits without waiting for the
// disk, and only it: the setting is the transaction's, not the session's.
func TestClaimSettingsHoldForTheirTransactionOnly(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.Database(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // every statement below on the same session
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := postgres.New(pool)

	setting := func(settings string) (commit, sorts string) {
		err := s.RunAllWith(t.Context(), settings, func(b *pgx.Batch) {
			b.Queue(`SELECT current_setting('synchronous_commit'), current_setting('enable_sort')`).QueryRow(func(r pgx.Row) error {
				return r.Scan(&commit, &sorts)
			})
		})
		require.NoError(t, err)
		return commit, sorts
	}
	commit, sorts := setting(postgres.ClaimSettings)
	require.Equal(t, "off", commit, "the claim's commit does not wait for the disk")
	require.Equal(t, "off", sorts, "and its planner is held to indexes, as every engine statement's")
	commit, sorts = setting(postgres.IndexPlans)
	require.Equal(t, "on", commit, "the next transaction on the session waits again")
	require.Equal(t, "off", sorts)
	var session string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT current_setting('enable_sort')`).Scan(&session))
	require.Equal(t, "on", session, "nothing stays set on the session")
}
