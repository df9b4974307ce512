package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/durable-go/durable/internal/store/sqlite"
)

// The engine on SQLite: the one file of the engine that knows its store is
// SQLite. Open calls openSQLite for a file path.

// openSQLite returns an engine on the SQLite file at path, created if need
// be (and its directory); Close closes the file.
func openSQLite(ctx context.Context, path string, opts Options) (*Engine, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("engine: create the SQLite file's directory: %w", err)
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e, err := newEngine(s, nil, opts, nil)
	if err != nil {
		s.Close()
		return nil, err
	}
	e.close = s.Close
	return e, nil
}
