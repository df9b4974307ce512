package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

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
