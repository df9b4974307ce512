package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/durable-go/durable/internal/store"
)

const (
	recordEngineSQL = `
INSERT INTO durable_engines (worker_id, schema_version, build, host, pid, started_at, seen_at)
VALUES (@worker_id, @schema_version, @build, @host, @pid, @now, @now)
ON CONFLICT (worker_id) DO UPDATE
SET schema_version = excluded.schema_version, build = excluded.build, host = excluded.host, pid = excluded.pid,
    seen_at = excluded.seen_at`
	forgetEngineSQL = `DELETE FROM durable_engines WHERE worker_id = @worker_id`
	enginesTableSQL = `SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'durable_engines')`
	listEnginesSQL  = `
SELECT worker_id, schema_version, build, host, pid, started_at, seen_at
FROM durable_engines
ORDER BY worker_id`
)

// RecordEngine implements store.Store.
func (s *Store) RecordEngine(ctx context.Context, e store.EngineRecord) error {
	now, err := s.Now(ctx)
	if err != nil {
		return fmt.Errorf("record engine %s: %w", e.WorkerID, err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, recordEngineSQL, sql.Named("worker_id", e.WorkerID), sql.Named("schema_version", e.SchemaVersion),
			sql.Named("build", e.Build), sql.Named("host", e.Host), sql.Named("pid", e.PID), sql.Named("now", micros(now)))
		return err
	})
	if err != nil {
		return fmt.Errorf("record engine %s: %w", e.WorkerID, err)
	}
	return nil
}

// ForgetEngine implements store.Store.
func (s *Store) ForgetEngine(ctx context.Context, workerID string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, forgetEngineSQL, sql.Named("worker_id", workerID))
		return err
	})
	if err != nil {
		return fmt.Errorf("forget engine %s: %w", workerID, err)
	}
	return nil
}

// ListEngines implements store.Store.
func (s *Store) ListEngines(ctx context.Context) ([]store.EngineRecord, error) {
	var exists bool
	if err := s.reader().QueryRowContext(ctx, enginesTableSQL).Scan(&exists); err != nil {
		return nil, fmt.Errorf("list engines: %w", err)
	}
	if !exists {
		return nil, nil // a schema before 0002
	}
	es, err := queryAll(ctx, s.reader(), listEnginesSQL, func(rows *sql.Rows) (store.EngineRecord, error) {
		var (
			e             store.EngineRecord
			started, seen int64
		)
		err := rows.Scan(&e.WorkerID, &e.SchemaVersion, &e.Build, &e.Host, &e.PID, &started, &seen)
		e.StartedAt, e.SeenAt = fromMicros(started), fromMicros(seen)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list engines: %w", err)
	}
	return es, nil
}
