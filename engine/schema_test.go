package engine_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/internal/store/sqlite"
)

// An engine started against a schema that a newer release migrated, and
// whose migrations need engines of that release, refuses to start with a
// message that says so; when the newer migration says this build may run on
// beside it (a migration that only adds), the engine starts. With and
// without SkipMigrate, on both stores.
func TestEngineOnANewerSchema(t *testing.T) {
	t.Parallel()
	type database struct {
		// setFuture records a migration one past this build's, needing
		// engines of oldest or later.
		setFuture func(t *testing.T, oldest int)
		open      func(t *testing.T, opts engine.Options) (*engine.Engine, error)
		want      int
	}
	stores := map[string]func(t *testing.T) database{
		"Postgres": func(t *testing.T) database {
			pool := pgtest.Pool(t)
			want := postgres.SchemaVersion()
			return database{
				want: want,
				setFuture: func(t *testing.T, oldest int) {
					_, err := pool.Exec(t.Context(), `
INSERT INTO durable_schema_migrations (version, name, oldest_engine) VALUES ($1, 'future', $2)
ON CONFLICT (version) DO UPDATE SET oldest_engine = excluded.oldest_engine`, want+1, oldest)
					require.NoError(t, err)
				},
				open: func(t *testing.T, opts engine.Options) (*engine.Engine, error) { return engine.New(pool, opts) },
			}
		},
		"SQLite": func(t *testing.T) database {
			path := filepath.Join(t.TempDir(), "durable.db")
			e, err := engine.Open(t.Context(), path, engine.Options{Logger: quietLogger()})
			require.NoError(t, err)
			want := sqlite.SchemaVersion()
			setFuture := func(t *testing.T, oldest int) {
				err := e.SQLiteTx(t.Context(), func(tx *sql.Tx) error {
					_, err := tx.ExecContext(t.Context(), `
INSERT INTO durable_schema_migrations (version, name, applied_at, oldest_engine) VALUES (?, 'future', 0, ?)
ON CONFLICT (version) DO UPDATE SET oldest_engine = excluded.oldest_engine`, want+1, oldest)
					return err
				})
				require.NoError(t, err)
			}
			t.Cleanup(func() { require.NoError(t, e.Close()) })
			return database{
				want: want, setFuture: setFuture,
				open: func(t *testing.T, opts engine.Options) (*engine.Engine, error) {
					e, err := engine.Open(t.Context(), path, opts)
					if err == nil {
						t.Cleanup(func() { require.NoError(t, e.Close()) })
					}
					return e, err
				},
			}
		},
	}
	for name, newDB := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			db.setFuture(t, db.want+1)
			for _, skip := range []bool{false, true} {
				_, err := db.open(t, engine.Options{Logger: quietLogger(), SkipMigrate: skip})
				require.Error(t, err, "SkipMigrate %v", skip)
				require.ErrorContains(t, err, "schema is at version "+strconv.Itoa(db.want+1)+", newer than this build's "+strconv.Itoa(db.want))
				require.ErrorContains(t, err, "upgrade durable")
			}

			db.setFuture(t, db.want)
			var logs bytes.Buffer
			e, err := db.open(t, engine.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err, "the newer migration lets this build run on")
			require.NotNil(t, e)
			require.Contains(t, logs.String(), "the database schema is newer than this build's")
		})
	}
}

// A running engine records itself while Run runs, with the schema version
// its build needs, and forgets itself when Run returns: what `durable
// migrate` reads to know which engines a migration would break.
func TestRunningEngineRecordsItself(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{WorkerID: "records-itself"})
	s := postgres.New(pool)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	require.Eventually(t, func() bool {
		es, err := s.ListEngines(t.Context())
		require.NoError(t, err)
		return len(es) == 1 && es[0].WorkerID == "records-itself" && es[0].SchemaVersion == postgres.SchemaVersion()
	}, 10*time.Second, 5*time.Millisecond, "recorded while running")
	stop()
	require.NoError(t, <-done)
	es, err := s.ListEngines(t.Context())
	require.NoError(t, err)
	require.Empty(t, es, "forgotten once Run returned")
}
