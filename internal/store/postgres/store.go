// Package postgres implements the engine's store on PostgreSQL with pgx.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/batch"
	"github.com/durable-go/durable/internal/store"
)

// dbtx is what both a pool and a transaction offer.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store is the PostgreSQL store.
type Store struct {
	db   dbtx
	pool *pgxpool.Pool
	// caller is set when db is a caller's transaction (WithTx), whose
	// commit the store makes durable (durableCommit) with each statement.
	caller bool
	// The rest is shared by the copies WithTx makes.
	group  *atomic.Pointer[grouper]
	starts *batch.Batcher[*groupReq] // see Batch
	reads  *batch.Batcher[*runRead]
}

var _ store.Store = (*Store)(nil)

// New returns a store on pool. It does not migrate; see Migrate.
func New(pool *pgxpool.Pool) *Store {
	return &Store{db: pool, pool: pool, group: new(atomic.Pointer[grouper])}
}

// WithTx returns a store whose writes happen inside tx: they commit or roll
// back with the caller's transaction.
func (s *Store) WithTx(tx pgx.Tx) *Store {
	in := s.in(tx)
	in.caller = true
	return in
}

// InTx implements store.Store: fn's calls run in one transaction of
// their own, as a caller's (WithTx).
func (s *Store) InTx(ctx context.Context, fn func(store.Store) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(s.WithTx(tx)) })
}

// in returns s bound to tx, a transaction of s's own (inTx) or, in a store
// bound to a caller's, a savepoint of it: a transaction of the store's own
// made its commit durable when it began.
func (s *Store) in(tx pgx.Tx) *Store {
	return &Store{db: tx, pool: s.pool, caller: s.caller, group: s.group, starts: s.starts, reads: s.reads}
}

// Pool returns the pool the store was made with.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// translate maps Postgres errors to the store's sentinels. A data exception
// (SQLSTATE class 22: a NUL byte or invalid UTF-8 in text, a value out of
// range) is store.ErrUnstorable: the same write fails every time.
func translate(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case !errors.As(err, &pgErr):
	case pgErr.Code == "23505": // unique_violation
		return fmt.Errorf("%w: %s", store.ErrConflict, pgErr.Message)
	case strings.HasPrefix(pgErr.Code, "22"):
		return fmt.Errorf("%w: %s (SQLSTATE %s)", store.ErrUnstorable, pgErr.Message, pgErr.Code)
	}
	return err
}

// indexPlans is run in the transaction of every statement an engine runs
// (see run), before it. Their plans must not depend on statistics. A
// queue's ready set swings from empty to thousands of rows within a second,
// and statistics gathered in a quiet moment make the planner expect a few:
// a claim then read the whole ready set and sorted it (15 ms at 10,000
// ready tasks, growing with them) instead of walking the ready index in
// order and stopping after the limit (0.7 ms). A fire joined its due timers
// to their runs by scanning the whole runs table, closed runs included;
// planned for an empty table, a statement for many writes found its
// activity tasks by scanning the table, and a single write or read did the
// same. Turning off sorts and sequential scans for the one transaction
// leaves index walks and lookups, whose cost follows the rows taken. JIT
// goes too: the penalty those settings add to a plan's cost would trigger
// it, at hundreds of milliseconds a statement. Such a plan does not depend
// on the values either, so it is planned once per connection (a fire took
// 0.9 ms to plan, each time) and reused. That plan is still made on the
// statistics of its moment, so the statements are also written so that a
// plan made on nearly empty tables stays a lookup per key: a join of keys
// to a table is a LATERAL subquery, or names the keys again as = ANY (see
// TestPlansMadeOnEmptyTablesHoldAsTheyGrow in package engine).
//
// It also makes the commit durable (durableCommit).
const indexPlans = `SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true),
    set_config('plan_cache_mode', 'force_generic_plan', true), ` + durableCommit

// durableCommit makes a transaction's commit wait for the disk where the
// session or the database says it need not (synchronous_commit off), and
// leaves any other setting as it is (on, local, remote_write, remote_apply
// all wait at least for the local disk). The engine's guarantees rest on its
// writes surviving a Postgres crash once committed: an activity claim's
// attempt number, its fence, must never be handed out twice, and a run a
// worker can read may have its first activity run before that worker
// commits anything (engine.Options.ActivityRunAhead), so the start, or the
// signal, it read must not be lost after the activity ran. It goes into
// every transaction the store writes in, the caller's of StartTx, SignalTx
// and EnqueueTx too, where it is the one setting the store changes.
const durableCommit = `CASE current_setting('synchronous_commit') WHEN 'off' THEN set_config('synchronous_commit', 'local', true) END`

// indexPlansNoFlush is indexPlans for a transaction that does not wait for
// its commit to reach the disk (synchronous_commit off): Postgres writes it
// out within wal_writer_delay, or sooner with any later commit that waits.
// Only a workflow-task claim commits so (see ClaimWorkflowTasks).
const indexPlansNoFlush = indexPlans + `, set_config('synchronous_commit', 'off', true)`

// run runs sql with args, its results handed over by read (one of
// QueuedQuery's QueryRow, Query or Exec), with the planner held to
// indexes (indexPlans): on the store's pool as one implicit transaction
// (the settings are local to it) in one round trip. Bound to a caller's
// transaction, whose planner settings it must not change, it runs the
// statement as it is, after durableCommit in the same round trip. Every
// statement an engine runs in its work goes through it; only those that
// scan by nature do not: the admin reads, and the releases of a stopping
// worker's claims.
func (s *Store) run(ctx context.Context, sql string, args []any, read func(*pgx.QueuedQuery)) error {
	return s.runAll(ctx, func(b *pgx.Batch) { read(b.Queue(sql, args...)) })
}

// runAll is run for the statements queue adds to b, one after another in
// the same round trip and transaction.
func (s *Store) runAll(ctx context.Context, queue func(b *pgx.Batch)) error {
	return s.runAllWith(ctx, indexPlans, queue)
}

// runAllWith is runAll with settings, a statement like indexPlans that sets
// the transaction's settings, in place of indexPlans.
func (s *Store) runAllWith(ctx context.Context, settings string, queue func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	switch {
	case s.db == dbtx(s.pool):
		b.Queue(settings)
	case s.caller:
		b.Queue(`SELECT ` + durableCommit)
	}
	queue(b)
	return s.db.SendBatch(ctx, b).Close()
}

// inTx runs fn in a transaction of the store's, with the planner held to
// indexes for all of it (see run): the settings go with BEGIN, in its round
// trip. Bound to a caller's transaction, it runs fn in a savepoint of it,
// as it is.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if s.db != dbtx(s.pool) {
		return pgx.BeginFunc(ctx, s.db, fn)
	}
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: "BEGIN; " + indexPlans}, fn)
}

// queryRow runs a statement that returns one row, read by scan (see run).
func (s *Store) queryRow(ctx context.Context, sql string, scan func(pgx.Row) error, args ...any) error {
	return s.run(ctx, sql, args, func(q *pgx.QueuedQuery) { q.QueryRow(scan) })
}

// query runs a statement and hands its rows to each (see run).
func (s *Store) query(ctx context.Context, sql string, each func(pgx.Rows) error, args ...any) error {
	return s.run(ctx, sql, args, func(q *pgx.QueuedQuery) { q.Query(each) })
}

// scanInto reads a row into dest.
func scanInto(dest ...any) func(pgx.Row) error {
	return func(row pgx.Row) error { return row.Scan(dest...) }
}

// exec runs a statement for its command tag (see run).
func (s *Store) exec(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
	err = s.run(ctx, sql, args, func(q *pgx.QueuedQuery) {
		q.Exec(func(t pgconn.CommandTag) error { tag = t; return nil })
	})
	return tag, err
}

// queryIndexed runs a statement and returns its rows, each read by scan
// (see run).
func queryIndexed[T any](ctx context.Context, s *Store, sql string, args namedArgs, scan pgx.RowToFunc[T]) (out []T, err error) {
	err = s.query(ctx, sql, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, scan)
		return err
	}, args)
	return out, err
}
