package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/datasource"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/internal/store/sqlite"
)

// The database a command works on: PostgreSQL or a SQLite file, named by
// --db, else $DATABASE_URL, else the development SQLite file. The store
// comes from the DSN as engine.Open picks it, so that the command and the
// programs that run engines see the same database.

// The stores the command knows.
const (
	storePostgres = datasource.Postgres
	storeSQLite   = datasource.SQLite
)

// database is the database the command line names.
type database struct {
	// kind is storePostgres or storeSQLite.
	kind string
	// target is the PostgreSQL URL or DSN, or the SQLite file's path.
	target string
}

// dsnForms says how to name a database, for the errors about --db.
const dsnForms = datasource.Forms

// parseDSN says which database dsn names, as engine.Open reads it
// (datasource.Parse); what it cannot read is a usage error.
func parseDSN(dsn string) (database, error) {
	kind, target, err := datasource.Parse(dsn)
	switch {
	case errors.Is(err, datasource.ErrEmpty):
		return database{}, usageError("--db is empty: %s", dsnForms)
	case err != nil:
		return database{}, usageError("--db: %v", err)
	}
	return database{kind: kind, target: target}, nil
}

// database returns the database the command works on, read once: --db,
// else $DATABASE_URL, else the development SQLite file, which it names on
// stderr (never on stdout, which --json keeps for its output).
func (a *app) database() (database, error) {
	if a.db != nil {
		return *a.db, nil
	}
	dsn, dev := a.dbURL, false
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	if dsn == "" {
		dsn, dev = engine.DevDatabase(), true
	}
	db, err := parseDSN(dsn)
	if err != nil {
		return database{}, err
	}
	if dev {
		fmt.Fprintf(a.stderr, "durable: using the development database %s (set --db or DATABASE_URL for another)\n", db.target)
	}
	a.db = &db
	return db, nil
}

// open opens the command's database and returns its store, without
// checking its schema. A SQLite file is created (and its directory) only
// if create is set: for migrate; to the other commands a file that is not
// there is a mistake in --db, not an empty database.
func (a *app) open(ctx context.Context, create bool) (store.Store, error) {
	db, err := a.database()
	if err != nil {
		return nil, err
	}
	if db.kind == storePostgres {
		pool, err := a.connect(ctx, db.target)
		if err != nil {
			return nil, err
		}
		return postgres.New(pool), nil
	}
	return a.openSQLite(ctx, db.target, create)
}

// openSQLite opens the SQLite file at path, once for the command. Any
// failure is exit code 4, naming the file.
func (a *app) openSQLite(ctx context.Context, path string, create bool) (*sqlite.Store, error) {
	if a.lite != nil {
		return a.lite, nil
	}
	unopenable := func(format string, args ...any) error {
		return &exitError{code: exitUnreachable, err: fmt.Errorf(format, args...)}
	}
	if create {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, unopenable("cannot create the directory of the SQLite database %s: %w", path, err)
		}
	} else if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, unopenable("no SQLite database at %s: check --db (or DATABASE_URL), or create it with `durable migrate`", path)
	} else if err != nil {
		return nil, unopenable("cannot open the SQLite database %s: %w", path, err)
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unopenable("cannot open the SQLite database %s: %w\ncheck --db (or DATABASE_URL): it must name a SQLite database file this user may read and write", path, err)
	}
	a.lite = s
	return s, nil
}

// connect opens the PostgreSQL pool on url, once for the command, and
// checks that the database answers.
func (a *app) connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if a.pool != nil {
		return a.pool, nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password and all.
		return nil, usageError("--db is not a valid PostgreSQL URL or DSN: want postgres://user@host:port/database")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.MaxConns = 4
	target := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("connect to %s: %w", target, err)}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf(
			"cannot reach the database at %s: %w\ncheck --db (or DATABASE_URL) and that PostgreSQL is running and accepts this user", target, err)}
	}
	a.pool = pool
	return pool, nil
}

// store opens the command's database and checks that its schema is what
// this binary needs.
func (a *app) store(ctx context.Context) (store.Store, error) {
	s, err := a.open(ctx, false)
	if err != nil {
		return nil, err
	}
	sc, err := a.schemaVersion(ctx, s)
	if err != nil {
		return nil, err
	}
	switch {
	case sc.Have < sc.Want:
		how := "run `durable migrate` (or apply `durable migrate print` with your own tools)"
		if a.db.kind == storeSQLite {
			how = "run `durable migrate`"
		}
		return nil, &exitError{code: exitSchema, err: fmt.Errorf(
			"database schema is at version %d, this binary needs %d: %s", sc.Have, sc.Want, how)}
	case sc.Want < sc.Oldest:
		return nil, &exitError{code: exitSchema, err: fmt.Errorf(
			"database schema is at version %d, and its migrations need a binary built for version %d or later; this one is for %d: upgrade durable",
			sc.Have, sc.Oldest, sc.Want)}
	}
	return s, nil
}

// schemaVersion reads s's schema version. A SQLite file that opens but
// cannot be read (not a database, say) is exit code 4, as one that does
// not open.
func (a *app) schemaVersion(ctx context.Context, s store.Store) (store.Schema, error) {
	sc, err := s.SchemaVersion(ctx)
	if err != nil && a.db.kind == storeSQLite && ctx.Err() == nil {
		return sc, &exitError{code: exitUnreachable, err: fmt.Errorf(
			"cannot read the SQLite database %s: %w\ncheck --db (or DATABASE_URL): it names a durable SQLite database", a.db.target, err)}
	}
	return sc, err
}

// clientEngine returns an engine on the command's database (which store
// opened) that runs no workers and migrates nothing, logging warnings to
// stderr: the command's client, for the calls that change runs. On
// PostgreSQL it shares the command's pool; on SQLite it is a second store
// on the same file, closed with the command.
func (a *app) clientEngine(ctx context.Context) (*engine.Engine, error) {
	opts := engine.Options{
		SkipMigrate: true,
		Logger:      slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if a.pool != nil {
		return engine.New(a.pool, opts)
	}
	e, err := engine.Open(ctx, "sqlite:"+a.db.target, opts)
	if err != nil {
		return nil, err
	}
	a.engines = append(a.engines, e)
	return e, nil
}

// requirePostgres returns a usage error unless the command's database is
// PostgreSQL: what, a command that prints PostgreSQL's SQL, has nothing to
// give for SQLite, and why says so.
func (a *app) requirePostgres(what, why string) error {
	db, err := a.database()
	if err != nil {
		return err
	}
	if db.kind == storePostgres {
		return nil
	}
	return usageError("%s is PostgreSQL's: %s (the database is the SQLite file %s; for PostgreSQL's, pass --db postgres://...)",
		what, why, db.target)
}

// close releases what the command opened: its client engines, then its
// store's file or pool.
func (a *app) close() {
	for _, e := range a.engines {
		_ = e.Close() // the command's outcome is already decided
	}
	if a.lite != nil {
		_ = a.lite.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
}
