package postgres_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return postgres.New(pgtest.Pool(t)) })
}

// TestStoreGroupCommit runs the suite with group commit on: every guarantee
// holds inside a group as it does alone.
func TestStoreGroupCommit(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s := postgres.New(pgtest.Pool(t))
		t.Cleanup(s.StartGroupCommit(2, 64))
		return s
	})
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	var all []int
	for _, m := range postgres.Migrations() {
		all = append(all, m.Version)
	}
	tests := []struct {
		name string
		// database returns a pool on the database to migrate.
		database func(t *testing.T) *pgxpool.Pool
		// want is what the concurrent migrations apply between them.
		want []int
	}{
		{"Empty", emptyDatabase, all},
		{"Migrated", func(t *testing.T) *pgxpool.Pool { return pgtest.Pool(t) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := tt.database(t)

			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				applied []int
				errs    []error
			)
			for range 4 {
				wg.Go(func() {
					vs, err := postgres.Migrate(ctx, pool)
					mu.Lock()
					defer mu.Unlock()
					applied = append(applied, vs...)
					errs = append(errs, err)
				})
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			slices.Sort(applied)
			require.Equal(t, tt.want, applied, "each missing migration is applied once, by one of the callers")

			v, err := postgres.CurrentVersion(ctx, pool)
			require.NoError(t, err)
			require.Equal(t, postgres.SchemaVersion(), v)
			var rows int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM durable_schema_migrations").Scan(&rows))
			require.Equal(t, len(all), rows)

			again, err := postgres.Migrate(ctx, pool)
			require.NoError(t, err)
			require.Empty(t, again, "a current schema needs nothing")
		})
	}
}

// emptyDatabase returns a pool on a database with no schema at all.
func emptyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.EmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
