package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/durable-go/durable/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLockID is the pg_advisory_lock key held while migrating: the
// first eight bytes of sha256("durable migrations").
const migrationLockID int64 = 0x2a6d1f0c9e4b7a31

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
const oldestEngineSince = 9

// recordMigration records m as applied, in the transaction that applied it.
func recordMigration(ctx context.Context, tx pgx.Tx, m Migration) error {
	if m.Version < oldestEngineSince {
		_, err := tx.Exec(ctx, "INSERT INTO durable_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
		return err
	}
	_, err := tx.Exec(ctx, "INSERT INTO durable_schema_migrations (version, name, oldest_engine) VALUES ($1, $2, $3)",
		m.Version, m.Name, m.OldestEngine)
	return err
}

// SchemaHash identifies the embedded migrations' content; test helpers use it
// to name template databases.
func SchemaHash() string {
	h := sha256.New()
	for _, m := range Migrations() {
		h.Write([]byte(m.Name))
		h.Write([]byte(m.SQL))
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// CreateMigrationsTable creates the table that records the applied
// migrations, unless it exists.
const CreateMigrationsTable = `
CREATE TABLE IF NOT EXISTS durable_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies the migrations the database lacks. It holds an advisory lock
// on one connection for the whole run, so several processes may call it at
// once; each migration runs in its own transaction. It returns the versions it
// applied (none when the schema is current).
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockID); err != nil {
		return nil, fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() {
		// Unlock on a fresh context: ctx may be done, and a connection that
		// still holds the lock must not go back to the pool.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockID); err != nil {
			conn.Conn().Close(context.Background())
		}
	}()

	if _, err := conn.Exec(ctx, CreateMigrationsTable); err != nil {
		return nil, fmt.Errorf("migrate: create durable_schema_migrations: %w", err)
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	var done []int
	for _, m := range Migrations() {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			return recordMigration(ctx, tx, m)
		})
		if err != nil {
			return done, fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// CurrentVersion returns the highest applied migration version, or 0 for a
// database that was never migrated.
func CurrentVersion(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var v int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM durable_schema_migrations").Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM durable_schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	m := make(map[int]bool, len(vs))
	for _, v := range vs {
		m[v] = true
	}
	return m, nil
}

// Migrate implements store.Store with Migrate on the store's pool.
func (s *Store) Migrate(ctx context.Context) ([]int, error) { return Migrate(ctx, s.pool) }

// Migrations implements store.Store.
func (s *Store) Migrations() []Migration { return Migrations() }

// SchemaVersion implements store.Store.
func (s *Store) SchemaVersion(ctx context.Context) (store.Schema, error) {
	sc := store.Schema{Want: SchemaVersion()}
	have, err := CurrentVersion(ctx, s.pool)
	if err != nil {
		return sc, err
	}
	sc.Have, sc.Oldest = have, have
	if have >= oldestEngineSince {
		err = s.pool.QueryRow(ctx, "SELECT max(coalesce(oldest_engine, version)) FROM durable_schema_migrations").Scan(&sc.Oldest)
		if err != nil {
			return sc, fmt.Errorf("read the schema's oldest engine version: %w", err)
		}
	}
	return sc, nil
}
