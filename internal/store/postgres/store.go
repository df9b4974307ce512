// Package postgres implements the engine's store on PostgreSQL with pgx.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/store"
)

// NotifyChannel is the LISTEN/NOTIFY channel the store announces work on.
// Payloads: "w:<queue>" a workflow task is ready, "a:<queue>" an activity task
// is ready, "c:<run id>" a run closed.
const NotifyChannel = "durable"

// dbtx is what both a pool and a transaction offer.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store is the PostgreSQL store.
type Store struct {
	db    dbtx
	pool  *pgxpool.Pool
	group *atomic.Pointer[grouper] // shared by the copies WithTx makes
}

var _ store.Store = (*Store)(nil)

// New returns a store on pool. It does not migrate; see Migrate.
func New(pool *pgxpool.Pool) *Store {
	return &Store{db: pool, pool: pool, group: new(atomic.Pointer[grouper])}
}

// WithTx returns a store whose writes happen inside tx: they commit or roll
// back with the caller's transaction.
func (s *Store) WithTx(tx pgx.Tx) *Store {
	return &Store{db: tx, pool: s.pool, group: s.group}
}

// Pool returns the pool the store was made with.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// translate maps Postgres errors to the store's sentinels.
func translate(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %s", store.ErrConflict, pgErr.Message)
	}
	return err
}
