package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/durable-go/durable/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned, forward-only schema change.
type Migration = store.Migration

// Migrations returns the embedded migrations in version order.
func Migrations() []Migration { return store.ReadMigrations(migrationFS, "migrations") }

// SchemaVersion is the schema version this build needs.
func SchemaVersion() int {
	ms := Migrations()
	return ms[len(ms)-1].Version
}

// oldestEngineSince is the migration that added
// durable_schema_migrations.oldest_engine: it and those after it record
// their Migration.OldestEngine there.
const oldestEngineSince = 2

// The table that records the applied migrations, as in Postgres.
const (
	createMigrationsTableSQL = `
CREATE TABLE IF NOT EXISTS durable_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)`
	migrationAppliedSQL     = `SELECT EXISTS (SELECT 1 FROM durable_schema_migrations WHERE version = @version)`
	recordMigrationSQL      = `INSERT INTO durable_schema_migrations (version, name, applied_at) VALUES (@version, @name, @at)`
	recordMigrationOldest   = `INSERT INTO durable_schema_migrations (version, name, applied_at, oldest_engine) VALUES (@version, @name, @at, @oldest)`
	oldestEngineSQL         = `SELECT max(coalesce(oldest_engine, version)) FROM durable_schema_migrations`
	migrationsTableSQL      = `SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'durable_schema_migrations')`
	currentVersionSQL       = `SELECT coalesce(max(version), 0) FROM durable_schema_migrations`
	listAppliedMigrationSQL = `SELECT version, name, applied_at FROM durable_schema_migrations ORDER BY version`
)

// Migrate implements store.Store: it applies the migrations the file lacks,
// each in a write transaction of its own that also records it. A write
// transaction holds the file's write lock, so stores migrating the same
// file at once (in this process or another) apply each migration once: the
// others find it recorded. It returns the versions it applied, none when
// the schema is current.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	var done []int
	for _, m := range Migrations() {
		applied := false
		err := s.write(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, createMigrationsTableSQL); err != nil {
				return fmt.Errorf("create durable_schema_migrations: %w", err)
			}
			var have bool
			if err := tx.QueryRowContext(ctx, migrationAppliedSQL, sql.Named("version", m.Version)).Scan(&have); err != nil {
				return fmt.Errorf("read the applied migrations: %w", err)
			}
			if have {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			at, err := s.Now(ctx)
			if err != nil {
				return err
			}
			record := recordMigrationSQL
			if m.Version >= oldestEngineSince {
				record = recordMigrationOldest
			}
			_, err = tx.ExecContext(ctx, record, sql.Named("version", m.Version), sql.Named("name", m.Name),
				sql.Named("at", micros(at)), sql.Named("oldest", m.OldestEngine))
			applied = err == nil
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrate sqlite store %s: apply %s: %w", s.path, m.Name, err)
		}
		if applied {
			done = append(done, m.Version)
		}
	}
	return done, nil
}

// Migrations implements store.Store.
func (s *Store) Migrations() []Migration { return Migrations() }

// SchemaVersion implements store.Store: the highest migration applied (0
// for a file never migrated), the one this build needs, and the oldest
// an engine may be built for.
func (s *Store) SchemaVersion(ctx context.Context) (store.Schema, error) {
	sc := store.Schema{Want: SchemaVersion()}
	var exists bool
	if err := s.reader().QueryRowContext(ctx, migrationsTableSQL).Scan(&exists); err != nil || !exists {
		if err != nil {
			err = fmt.Errorf("read the schema version: %w", err)
		}
		return sc, err
	}
	if err := s.reader().QueryRowContext(ctx, currentVersionSQL).Scan(&sc.Have); err != nil {
		return sc, fmt.Errorf("read the schema version: %w", err)
	}
	sc.Oldest = sc.Have
	if sc.Have >= oldestEngineSince {
		if err := s.reader().QueryRowContext(ctx, oldestEngineSQL).Scan(&sc.Oldest); err != nil {
			return sc, fmt.Errorf("read the schema's oldest engine version: %w", err)
		}
	}
	return sc, nil
}

// ListAppliedMigrations implements store.Store: the migrations applied, in
// version order; none for a file never migrated.
func (s *Store) ListAppliedMigrations(ctx context.Context) ([]store.AppliedMigration, error) {
	var exists bool
	if err := s.reader().QueryRowContext(ctx, migrationsTableSQL).Scan(&exists); err != nil {
		return nil, fmt.Errorf("list applied migrations: %w", err)
	}
	if !exists {
		return nil, nil
	}
	ms, err := queryAll(ctx, s.reader(), listAppliedMigrationSQL, func(rows *sql.Rows) (store.AppliedMigration, error) {
		var (
			m  store.AppliedMigration
			at int64
		)
		err := rows.Scan(&m.Version, &m.Name, &at)
		m.AppliedAt = fromMicros(at)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("list applied migrations: %w", err)
	}
	return ms, nil
}
