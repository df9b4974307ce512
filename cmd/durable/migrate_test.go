package main

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store/postgres"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	var all []int
	for _, m := range postgres.Migrations() {
		all = append(all, m.Version)
	}
	tests := []struct {
		name     string
		database func(t *testing.T) string
		want     []int
	}{
		{"Migrated", func(t *testing.T) string { return pgtest.Database(t) }, nil},
		{"Empty", emptyDatabase, all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := tt.database(t)

			r := durable(t, db, "--json", "migrate")
			requireCode(t, exitOK, r)
			var out migrateOutput
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
			var applied []int
			for _, m := range out.Applied {
				applied = append(applied, m.Version)
				require.NotEmpty(t, m.Name)
			}
			require.Equal(t, tt.want, applied)
			require.Equal(t, postgres.SchemaVersion(), out.Version)

			r = durable(t, db, "migrate")
			requireCode(t, exitOK, r)
			require.Contains(t, r.stdout, "nothing to apply", "a second migrate finds the schema current")
		})
	}

	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		r := durable(t, emptyDatabase(t), "migrate")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "applied "+postgres.Migrations()[0].Name)
	})
}

func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	t.Run("Current", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Database(t)
		r := durable(t, db, "migrate", "status")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "up to date")
		require.Contains(t, r.stdout, postgres.Migrations()[0].Name)

		r = durable(t, db, "--json", "migrate", "status")
		requireCode(t, exitOK, r)
		var out statusOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.True(t, out.UpToDate)
		require.Equal(t, postgres.SchemaVersion(), out.Current)
		require.Equal(t, postgres.SchemaVersion(), out.Needed)
		require.Len(t, out.Migrations, len(postgres.Migrations()))
		for _, m := range out.Migrations {
			require.NotNil(t, m.AppliedAt, "migration %d", m.Version)
			require.True(t, m.Known)
		}
	})
	t.Run("Behind", func(t *testing.T) {
		t.Parallel()
		db := emptyDatabase(t)
		r := durable(t, db, "--json", "migrate", "status")
		requireCode(t, exitSchema, r)
		require.Contains(t, r.stderr, "run `durable migrate`")
		var out statusOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.False(t, out.UpToDate)
		require.Zero(t, out.Current)
		for _, m := range out.Migrations {
			require.Nil(t, m.AppliedAt, "migration %d", m.Version)
		}

		r = durable(t, db, "migrate", "status")
		requireCode(t, exitSchema, r)
		require.Contains(t, r.stdout, "pending")
	})
}

func TestMigratePrint(t *testing.T) {
	t.Parallel()
	// print reads no database: an unreachable one does not matter.
	r := durable(t, unreachable, "migrate", "print")
	requireCode(t, exitOK, r)
	require.Contains(t, r.stdout, "CREATE TABLE durable_runs")
	require.Contains(t, r.stdout, "INSERT INTO durable_schema_migrations")
	require.Equal(t, postgres.MigrationScript(0), r.stdout)

	r = durable(t, unreachable, "migrate", "print", "--after", "1000000")
	requireCode(t, exitOK, r)
	require.NotContains(t, r.stdout, "CREATE TABLE durable_runs")

	r = durable(t, unreachable, "--json", "migrate", "print")
	requireCode(t, exitOK, r)
	var ms []postgres.Migration
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ms), r.stdout)
	require.Equal(t, postgres.Migrations(), ms)
}

// migrate --dry-run lists what it would apply and the engines running,
// and migrate refuses to apply a migration that a running engine cannot
// run with, naming the engine, and applies nothing.
func TestMigrateAndRunningEngines(t *testing.T) {
	t.Parallel()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{WorkerID: "cli-engine", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	runEngine(t, e)

	var plan planOutput
	require.Eventually(t, func() bool {
		r := durable(t, db, "--json", "migrate", "--dry-run")
		requireCode(t, exitOK, r)
		plan = planOutput{}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan), r.stdout)
		return len(plan.Engines) == 1
	}, 10*time.Second, 10*time.Millisecond, "the running engine is listed")
	require.Empty(t, plan.Pending)
	require.Equal(t, "cli-engine", plan.Engines[0].WorkerID)
	require.Equal(t, postgres.SchemaVersion(), plan.Engines[0].SchemaVersion)
	require.Empty(t, plan.Blocked)

	// An engine of a build that needs schema 3 is running, and migration 4
	// is missing: applying it would leave that engine behind.
	_, err = pool.Exec(t.Context(), `
INSERT INTO durable_engines (worker_id, schema_version, build, host, pid, started_at, seen_at)
VALUES ('old-engine', 3, 'v0.0.1', 'h', 7, now(), now())`)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `DELETE FROM durable_schema_migrations WHERE version = 4`)
	require.NoError(t, err)
	fourth := postgres.Migrations()[3]
	require.Equal(t, 4, fourth.Version)

	r := durable(t, db, "migrate", "--dry-run")
	requireCode(t, exitSchema, r)
	require.Contains(t, r.stdout, "migrate would apply:")
	require.Contains(t, r.stdout, fourth.Name)
	require.Regexp(t, `old-engine\s+3\s+v0\.0\.1.*NO`, r.stdout)
	require.Regexp(t, `cli-engine\s+\d+\s.*yes`, r.stdout)
	require.Contains(t, r.stderr, "migrate would refuse")

	r = durable(t, db, "migrate")
	requireCode(t, exitSchema, r)
	require.Contains(t, r.stderr, "migration "+fourth.Name+" needs engines built for schema version 4 or later")
	require.Contains(t, r.stderr, "old-engine (schema 3, build v0.0.1)")
	require.Contains(t, r.stderr, "--force")
	var applied bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM durable_schema_migrations WHERE version = 4)`).Scan(&applied))
	require.False(t, applied, "nothing was applied")
}
