package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // database/sql's "sqlite" driver, the store's own

	"github.com/durable-go/durable/engine"
)

// Why the parts of the workloads that SQLite cannot run are skipped: the
// table shows these, and the JSON lines' "skipped" names the fields left
// out before them.
const (
	whyNoCommitCount = "the commit count is PostgreSQL's statistic (pg_stat_database.xact_commit); SQLite keeps none"
	whyCrossProcess  = "the SQLite store's notes do not cross processes, so a client in another process would learn of results only when it polls"
	whyProcesses     = "it runs several engine processes on one database, and the SQLite store's notes do not cross processes"
)

// sqliteFile is the name of the bench's SQLite file in its directory.
const sqliteFile = "bench.db"

// openSQLite makes a fresh SQLite file in a new temporary directory and
// brings its schema up to date, so that the first workload does not pay
// for it (as the bench database is made before the workloads on
// PostgreSQL).
func (b *bench) openSQLite(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "durable-bench-")
	if err != nil {
		return fmt.Errorf("make a directory for the SQLite file: %w (set TMPDIR to a writable directory)", err)
	}
	b.dir, b.file = dir, filepath.Join(dir, sqliteFile)
	e, err := b.openSQLiteEngine(ctx)
	if err == nil {
		err = e.Close()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("create the SQLite file %s: %w", b.file, err), os.RemoveAll(dir))
	}
	fmt.Fprintf(b.progress, "SQLite file %s\n", b.file)
	return nil
}

// closeSQLite removes the SQLite file's directory, unless -keep: then it
// says where the file is, on standard error even with -json-only, since
// the path is known nowhere else.
func (b *bench) closeSQLite() error {
	if b.cfg.keep {
		fmt.Fprintf(b.stderr, "kept SQLite file %s\n", b.file)
		return nil
	}
	if err := os.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("remove the SQLite file's directory: %w", err)
	}
	return nil
}

// openSQLiteEngine opens an engine on the bench's SQLite file with the
// workloads registered (and the options newEngine gives on PostgreSQL). It
// does not run; Close releases the file.
func (b *bench) openSQLiteEngine(ctx context.Context) (*engine.Engine, error) {
	e, err := engine.Open(ctx, "sqlite:"+b.file, engine.Options{Logger: b.log, CacheSize: b.cfg.cache})
	if err != nil {
		return nil, err
	}
	if err := register(e); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

// sqliteStats reads W5's figures from the bench's SQLite file, on a
// read-only connection of its own: in WAL mode it sees the last commit
// and holds no lock the engine's writer waits for.
type sqliteStats struct{ db *sql.DB }

func (b *bench) openSQLiteStats() (*sqliteStats, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	// A URI from the root, as the store writes its own (file:///C:/... on
	// Windows), so that a "?" or "#" in the path stays in the path.
	p := filepath.ToSlash(b.file)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("open %s to read it: %w", b.file, err)
	}
	db.SetMaxOpenConns(1)
	return &sqliteStats{db: db}, nil
}

func (s *sqliteStats) timersAndTasks(ctx context.Context) (timers, tasks int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM durable_timers), (SELECT count(*) FROM durable_workflow_tasks)`).Scan(&timers, &tasks)
	if err != nil {
		return 0, 0, fmt.Errorf("count timers and tasks: %w", err)
	}
	return timers, tasks, nil
}

// size is the database's pages, those in the WAL not yet copied back
// included, in bytes.
func (s *sqliteStats) size(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()").Scan(&n); err != nil {
		return 0, fmt.Errorf("read the SQLite file's size: %w", err)
	}
	return n, nil
}

func (s *sqliteStats) close() error { return s.db.Close() }
