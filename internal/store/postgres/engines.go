package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/durable-go/durable/internal/store"
)

const (
	recordEngineSQL = `
INSERT INTO durable_engines (worker_id, schema_version, build, host, pid, started_at, seen_at)
VALUES ($1, $2, $3, $4, $5, now(), now())
ON CONFLICT (worker_id) DO UPDATE
SET schema_version = excluded.schema_version, build = excluded.build, host = excluded.host, pid = excluded.pid,
    seen_at = excluded.seen_at`
	forgetEngineSQL = `DELETE FROM durable_engines WHERE worker_id = $1`
	listEnginesSQL  = `
SELECT worker_id, schema_version, build, host, pid, started_at, seen_at
FROM durable_engines
ORDER BY worker_id`
)

// RecordEngine implements store.Store.
func (s *Store) RecordEngine(ctx context.Context, e store.EngineRecord) error {
	if _, err := s.db.Exec(ctx, recordEngineSQL, e.WorkerID, e.SchemaVersion, e.Build, e.Host, e.PID); err != nil {
		return fmt.Errorf("record engine %s: %w", e.WorkerID, err)
	}
	return nil
}

// ForgetEngine implements store.Store.
func (s *Store) ForgetEngine(ctx context.Context, workerID string) error {
	if _, err := s.db.Exec(ctx, forgetEngineSQL, workerID); err != nil {
		return fmt.Errorf("forget engine %s: %w", workerID, err)
	}
	return nil
}

// ListEngines implements store.Store.
func (s *Store) ListEngines(ctx context.Context) ([]store.EngineRecord, error) {
	rows, err := s.db.Query(ctx, listEnginesSQL)
	if err == nil {
		var es []store.EngineRecord
		es, err = pgx.CollectRows(rows, pgx.RowToStructByPos[store.EngineRecord])
		if err == nil {
			return es, nil
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: a schema before 0009
		return nil, nil
	}
	return nil, fmt.Errorf("list engines: %w", err)
}
