package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/durable-go/durable/internal/datasource"
)

// Open returns an engine on the database dsn names, with its schema brought
// up to date (unless Options.SkipMigrate):
//
//   - postgres://... or postgresql://... (or libpq's key=value form): a
//     PostgreSQL database, on a connection pool Open makes. To share a pool
//     of your own, use New.
//   - sqlite:PATH, file:PATH or a plain file path: a SQLite file, created
//     if it does not exist. Nothing but Go is needed: for development,
//     tests and single-process tools. One process at a time uses the file;
//     docs/stores.md says what each store is for and what SQLite lacks.
//
// Close releases what Open made, once Run has returned.
func Open(ctx context.Context, dsn string, opts Options) (*Engine, error) {
	kind, target, err := datasource.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("engine: open: %w", err)
	}
	if kind == datasource.Postgres {
		return openPostgres(ctx, target, opts)
	}
	return openSQLite(ctx, target, opts)
}

// Close closes the database connections Open made. Call it once Run has
// returned. It does nothing for an engine made by New: the pool is the
// caller's.
func (e *Engine) Close() error {
	if e.close == nil {
		return nil
	}
	return e.close()
}

// DefaultDSN is where a program with no database of its own keeps its
// runs: $DATABASE_URL if it is set, else the development SQLite file
// (DevDatabase). The examples and the durable CLI use it, so that they
// see the same runs; pass it to Open.
func DefaultDSN() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DevDatabase()
}

// DevDatabase is the path of the development SQLite file: durable/dev.db
// under the user's cache directory (~/.cache on Linux, ~/Library/Caches on
// macOS, %LocalAppData% on Windows), or under the temporary directory if
// there is none. It holds development runs only: delete it to start over.
func DevDatabase() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "durable", "dev.db")
}
