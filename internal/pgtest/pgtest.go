// Package pgtest gives each test its own PostgreSQL database, cloned from a
// migrated template.
//
// The database server comes from DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres). The template,
// durable_tmpl_<hash of the migrations>, is built once per schema under an
// advisory lock, so parallel test binaries share it. Each test's database is
// dropped when the test passes and kept, with its URL logged, when it fails.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/store/postgres"
)

// DefaultURL is the server tests use when DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	templateOnce sync.Once
	templateErr  error
	counter      atomic.Int64
)

// URL returns the admin database URL tests connect to.
func URL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Pool returns a pool on a fresh, migrated database of its own. The pool is
// closed and the database dropped in t.Cleanup (kept if the test failed).
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := PoolURL(t)
	return pool
}

// PoolURL is Pool that also returns the new database's URL, for tests that
// start other processes on it.
func PoolURL(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return poolURL(t, nil)
}

// PoolWith is Pool with its configuration changed by configure before the
// pool connects (a tracer, say).
func PoolWith(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	pool, _ := poolURL(t, configure)
	return pool
}

func poolURL(t testing.TB, configure func(*pgxpool.Config)) (*pgxpool.Pool, string) {
	t.Helper()
	url := Database(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", url, err)
	}
	cfg.MaxConns = 20
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", url, err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

// Database creates a fresh migrated database and returns its URL. It is
// dropped in t.Cleanup when the test passes, and kept (its URL logged) when
// it fails.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := connectAdmin(t, ctx)
	defer admin.Close(context.Background())
	tmpl := "durable_tmpl_" + postgres.SchemaHash()
	templateOnce.Do(func() { templateErr = ensureTemplate(ctx, admin, tmpl) })
	if templateErr != nil {
		t.Fatalf("pgtest: build template %s: %v", tmpl, templateErr)
	}
	return testDatabase(t, ctx, admin, tmpl)
}

// EmptyDatabase creates a database with no schema at all and returns its
// URL, for tests of migrating. Cleanup as Database.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := connectAdmin(t, ctx)
	defer admin.Close(context.Background())
	return testDatabase(t, ctx, admin, "")
}

func connectAdmin(t testing.TB, ctx context.Context) *pgx.Conn {
	t.Helper()
	admin, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("pgtest: no PostgreSQL at %s (set DATABASE_URL, or start it: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", URL(), err)
	}
	return admin
}

// testDatabase creates a database (from tmpl, or empty) that t.Cleanup drops
// unless the test failed, and returns its URL.
func testDatabase(t testing.TB, ctx context.Context, admin *pgx.Conn, tmpl string) string {
	t.Helper()
	name, err := createDatabase(ctx, admin, "durable_test", tmpl)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	url := withDatabaseURL(URL(), name)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: kept database of failed test: %s", url)
			return
		}
		if err := dropDatabase(name); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return url
}

// createDatabase creates a database named prefix and a unique suffix, from
// tmpl or empty, and returns its name.
func createDatabase(ctx context.Context, admin *pgx.Conn, prefix, tmpl string) (string, error) {
	name := fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9, counter.Add(1))
	sql := "CREATE DATABASE " + name
	if tmpl != "" {
		sql += " TEMPLATE " + tmpl
	}
	// CREATE DATABASE ... TEMPLATE fails if someone else is connected to the
	// template at that moment (another binary building it); retry briefly.
	var err error
	for i := 0; ; i++ {
		_, err = admin.Exec(ctx, sql)
		if err == nil || i == 50 || !strings.Contains(err.Error(), "is being accessed by other users") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

// dropDatabase drops a database, with its connections.
func dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, URL())
	if err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

func ensureTemplate(ctx context.Context, admin *pgx.Conn, tmpl string) error {
	const lockID = 0x64757261626c65 // "durable"
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockID) //nolint:errcheck // unlocks on close anyway
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tmpl).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	building := tmpl + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(withDatabaseURL(URL(), building))
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	_, err = postgres.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+tmpl)
	return err
}

// withDatabaseURL returns url pointing at database name.
func withDatabaseURL(url, name string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return url
	}
	q := ""
	if i := strings.IndexByte(url, '?'); i >= 0 {
		q = url[i:]
	}
	host := cfg.Host
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "/") {
		host = "[" + host + "]"
	}
	user := cfg.User
	if cfg.Password != "" {
		user += ":" + cfg.Password
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d", user, name, cfg.Host, cfg.Port)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s%s", user, host, cfg.Port, name, q)
}

// ExamplePool returns a pool on a new, empty database of the test server,
// and a function that closes the pool and drops the database. It is for
// runnable Example functions, which have no testing.TB; it panics on error.
func ExamplePool() (*pgxpool.Pool, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, URL())
	if err != nil {
		panic(err)
	}
	defer admin.Close(context.Background())
	name, err := createDatabase(ctx, admin, "durable_example", "")
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, withDatabaseURL(URL(), name))
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		if err := dropDatabase(name); err != nil {
			panic(err)
		}
	}
}
