package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/benchkit"
)

// bench is one run of the driver: the database the workloads run in and,
// on PostgreSQL, a connection beside it for the server's statistics.
type bench struct {
	cfg config
	// conn is the connection string the driver was given; dbName replaces
	// its database for every pool, here and in worker processes. Postgres
	// only.
	conn    string
	dbName  string
	created bool // dbName was created here: drop it at the end
	// admin is connected to another database of the server, so that reading
	// statistics adds no transaction to dbName's. Postgres only.
	admin *pgx.Conn
	// file is the SQLite file, in the temporary directory dir made for it.
	// SQLite only.
	file, dir string
	log       *slog.Logger // engines log errors only
	stderr    io.Writer    // for worker processes
	progress  io.Writer
}

// openBench makes the database the workloads run in: on PostgreSQL it
// connects to the server and creates the bench database, unless -db names
// one; on SQLite it makes a fresh file.
func openBench(ctx context.Context, c config, stderr, progress io.Writer) (*bench, error) {
	// Worker processes' output, engine logs and progress lines share stderr.
	stderr = &lockedWriter{w: stderr}
	if progress != io.Discard {
		progress = stderr
	}
	b := &bench{
		cfg: c, stderr: stderr, progress: progress,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	var err error
	if b.sqlite() {
		err = b.openSQLite(ctx)
	} else {
		err = b.openPostgres(ctx)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// openPostgres connects to the server and creates the bench database,
// unless -db names one.
func (b *bench) openPostgres(ctx context.Context) error {
	c := b.cfg
	b.conn = c.dbURL
	if b.conn == "" {
		b.conn = os.Getenv("DATABASE_URL")
	}
	if b.conn == "" {
		b.conn = defaultURL
	}
	cc, err := pgx.ParseConfig(b.conn)
	if err != nil {
		// The parse error may quote the URL, password and all.
		return errors.New("the database URL (-db or DATABASE_URL) is not a valid PostgreSQL URL: want postgres://user@host:port/database")
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 10 * time.Second
	}
	server := fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	if c.dbURL != "" {
		b.dbName = cc.Database
		if b.dbName == "postgres" {
			return errors.New("-db names the database postgres, which the driver reads statistics from: give it a database of its own")
		}
		cc.Database = "postgres"
	} else {
		b.dbName = fmt.Sprintf("durable_bench_%08x", rand.Uint32())
	}
	b.admin, err = pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect to %s/%s: %w (is PostgreSQL running? set DATABASE_URL or -db)", server, cc.Database, err)
	}
	if c.dbURL == "" {
		if _, err := b.admin.Exec(ctx, "CREATE DATABASE "+b.dbName); err != nil {
			b.admin.Close(context.Background())
			return fmt.Errorf("create database %s on %s: %w", b.dbName, server, err)
		}
		b.created = true
	}
	fmt.Fprintf(b.progress, "database %s on %s\n", b.dbName, server)
	return nil
}

// close drops the database the driver created, or removes its SQLite
// file, unless -keep.
func (b *bench) close() error {
	if b.sqlite() {
		return b.closeSQLite()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer b.admin.Close(ctx)
	if !b.created {
		return nil
	}
	if b.cfg.keep {
		fmt.Fprintf(b.progress, "kept database %s\n", b.dbName)
		return nil
	}
	if _, err := b.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+b.dbName+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", b.dbName, err)
	}
	return nil
}

// sqlite reports whether the workloads run on SQLite.
func (b *bench) sqlite() bool { return b.cfg.store == storeSQLite }

// head begins the result of workload w on this bench's store.
func (b *bench) head(w string) head { return head{Store: b.cfg.store, Workload: w} }

// pool opens a pool of at most conns connections on the bench database.
func (b *bench) pool(ctx context.Context, conns int) (*pgxpool.Pool, error) {
	return openPool(ctx, b.conn, b.dbName, conns)
}

// openPool opens a pool of conns connections on database dbName of the
// server conn names, all of them connected: a measurement should not pay
// for connecting, as a long-running process would not.
func openPool(ctx context.Context, conn, dbName string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, errors.New("the database URL is not a valid PostgreSQL URL")
	}
	cfg.ConnConfig.Database = dbName
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database %s: %w", dbName, err)
	}
	held := make([]*pgxpool.Conn, 0, conns)
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect to database %s: %w", dbName, err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	return pool, nil
}

// warmUp runs one OneNoop workflow on e to completion: once it has, e's
// workers poll and it listens for notifications.
func warmUp(ctx context.Context, e *engine.Engine) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := engine.Start(ctx, e, OneNoop, 0, engine.StartOptions{})
	if err == nil {
		_, err = r.Result(ctx)
	}
	if err != nil {
		return fmt.Errorf("warm-up workflow: %w", err)
	}
	return nil
}

// newEngine returns an engine with default options on pool (but for its
// cache size, -cache), with the workloads' workflows and activities
// registered. It does not run.
func newEngine(pool *pgxpool.Pool, log *slog.Logger, cacheSize int) (*engine.Engine, error) {
	e, err := engine.New(pool, engine.Options{Logger: log, CacheSize: cacheSize})
	if err != nil {
		return nil, err
	}
	if err := register(e); err != nil {
		return nil, err
	}
	return e, nil
}

// running is an engine whose Run runs in a goroutine, on a database
// handle of its own.
type running struct {
	*engine.Engine
	// pool is the engine's pool on PostgreSQL; nil on SQLite.
	pool *pgxpool.Pool
	// closeDB closes what the engine runs on, once Run has returned.
	closeDB func() error
	cancel  context.CancelFunc
	done    chan error
}

// startEngine runs an engine on the bench database in this process (on a
// pool of its own on PostgreSQL), with the workloads registered, and
// whatever more the extra functions register. It returns once the engine
// has run a warm-up workflow.
func (b *bench) startEngine(ctx context.Context, extra ...func(*engine.Engine) error) (*running, error) {
	r := &running{done: make(chan error, 1)}
	var err error
	if b.sqlite() {
		r.Engine, err = b.openSQLiteEngine(ctx)
		if err == nil {
			r.closeDB = r.Engine.Close
		}
	} else {
		r.pool, err = b.pool(ctx, b.cfg.conns)
		if err == nil {
			r.closeDB = func() error { r.pool.Close(); return nil }
			r.Engine, err = newEngine(r.pool, b.log, b.cfg.cache)
		}
	}
	for _, reg := range extra {
		if err == nil {
			err = reg(r.Engine)
		}
	}
	if err != nil {
		if r.closeDB != nil {
			err = errors.Join(err, r.closeDB())
		}
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	go func() { r.done <- r.Run(rctx) }()
	if err := warmUp(ctx, r.Engine); err != nil {
		return nil, errors.Join(err, r.stop())
	}
	return r, nil
}

// stop stops the engine's Run, waits for it and closes what it ran on.
func (r *running) stop() error {
	r.cancel()
	err := <-r.done
	if err != nil {
		err = fmt.Errorf("engine run: %w", err)
	}
	if cerr := r.closeDB(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close the engine's database: %w", cerr))
	}
	return err
}

// commits returns the transactions committed in the bench database so far,
// once every pool on it is closed (benchkit.Commits).
func (b *bench) commits(ctx context.Context) (int64, error) {
	return benchkit.Commits(ctx, b.admin, b.dbName)
}

// dbSize returns the size of the bench database in bytes.
func (b *bench) dbSize(ctx context.Context) (int64, error) {
	var n int64
	if err := b.admin.QueryRow(ctx, "SELECT pg_database_size($1)", b.dbName).Scan(&n); err != nil {
		return 0, fmt.Errorf("read size of %s: %w", b.dbName, err)
	}
	return n, nil
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
