package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/workflow"
)

// The engine on PostgreSQL: New, and the calls that run in a caller's
// transaction. This is the one file of the engine that knows its store is
// Postgres; everything else speaks to store.Store.

// pgBackend is the Postgres store an engine runs on.
type pgBackend struct {
	pool  *pgxpool.Pool
	store *postgres.Store
}

// New returns an engine on pool and brings the database schema up to date
// (unless Options.SkipMigrate). The pool stays the caller's: the engine never
// closes it.
func New(pool *pgxpool.Pool, opts Options) (*Engine, error) {
	return newOnPool(pool, opts, nil)
}

// openPostgres returns an engine on a pool of its own on the database at
// url; Close closes the pool.
func openPostgres(ctx context.Context, url string, opts Options) (*Engine, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("engine: open: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: open: %w", err)
	}
	e, err := New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	e.close = func() error { pool.Close(); return nil }
	return e, nil
}

// newOnPool is New with wrap between the engine and the store (see
// newEngine).
func newOnPool(pool *pgxpool.Pool, opts Options, wrap func(store.Store) store.Store) (*Engine, error) {
	if pool == nil {
		return nil, errors.New("engine: nil pool")
	}
	// Overlapping starts share commits, and overlapping reads of runs
	// statements, up to CommitGroupSize, as steps do while the engine runs.
	s := postgres.New(pool)
	s.Batch(opts.withDefaults().CommitGroupSize)
	return newEngine(s, &pgBackend{pool: pool, store: s}, opts, wrap)
}

// inTx returns the engine's store bound to the caller's transaction tx, or
// an error, naming call, if there is no tx or the engine is not on
// Postgres.
func (e *Engine) inTx(call string, tx pgx.Tx) (store.Store, error) {
	switch {
	case tx == nil:
		return nil, fmt.Errorf("%s: nil transaction", call)
	case e.pg == nil:
		return nil, fmt.Errorf("%s: %w", call, errNotPostgres)
	}
	return e.layered(e.pg.store.WithTx(tx)), nil
}

// errNotPostgres is what a call that takes a pgx.Tx returns on an engine
// whose store is not PostgreSQL.
var errNotPostgres = errors.New("this engine's store is SQLite, and the call takes a PostgreSQL transaction (pgx.Tx): open the engine on PostgreSQL, or see docs/stores.md for SQLite's forms")

// StartTx is Start inside the caller's transaction: the run exists if and only
// if tx commits. Use it to start a workflow together with the rows that call
// for it (the transactional outbox, built in).
//
// If tx's commit would not wait for the disk (synchronous_commit off), StartTx
// makes it wait (SET LOCAL synchronous_commit = local): the run's first
// activity may start as soon as tx commits, and a Postgres crash must not
// then lose the run. SignalTx and EnqueueTx do the same.
func StartTx[In, Out any](ctx context.Context, e *Engine, tx pgx.Tx, wf func(workflow.Context, In) (Out, error), in In, o StartOptions) (*Run[Out], error) {
	s, err := e.inTx("start workflow", tx)
	if err != nil {
		return nil, err
	}
	return start[Out](ctx, e, s, true, wf, in, o)
}

// SignalTx is Signal inside the caller's transaction: the signal is sent if
// and only if tx commits, and its commit waits for the disk (see StartTx).
func SignalTx[T any](ctx context.Context, e *Engine, tx pgx.Tx, workflowID, name string, v T) error {
	s, err := e.inTx("signal", tx)
	if err != nil {
		return err
	}
	return sendSignal(ctx, e, s, true, workflowID, name, v)
}

// EnqueueTx is Enqueue inside the caller's transaction: the job exists if and
// only if tx commits. A job enqueued next to a write that then rolls back is
// never run. Its commit waits for the disk (see StartTx).
func EnqueueTx[In, Out any](ctx context.Context, e *Engine, tx pgx.Tx, fn func(context.Context, In) (Out, error), in In, o JobOptions) (Job, error) {
	s, err := e.inTx("enqueue job", tx)
	if err != nil {
		return Job{}, err
	}
	return enqueue(ctx, e, s, true, fn, in, o)
}

// CompleteActivityTx is CompleteActivity inside the caller's transaction:
// the activity completes if and only if tx commits, and its workflow is
// woken at the commit.
func CompleteActivityTx[T any](ctx context.Context, e *Engine, tx pgx.Tx, token []byte, result T) error {
	s, err := e.inTx("complete activity", tx)
	if err != nil {
		return err
	}
	f, err := parseToken(token)
	if err != nil {
		return fmt.Errorf("complete activity: %w", err)
	}
	return completeActivity(ctx, e, s, true, f, result)
}

// TxBeginner begins transactions: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (for a savepoint).
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrNoIdempotencyKey is returned by ExactlyOnce outside an activity.
var ErrNoIdempotencyKey = errors.New("exactly once: no idempotency key in the context: call it from an activity")

// ExactlyOnce applies an activity's effects on your own database exactly
// once. It runs fn in a transaction on db that also records the activity's
// idempotency key and fn's result. When an attempt whose transaction
// committed is delivered again (a crash after the commit, a lost lease),
// fn does not run: ExactlyOnce returns the recorded result.
//
// The durable_effects table must be reachable through db: the engine's
// database, or a database where `durable migrate` has run. The recorded
// result is encoded with the engine's Options.Codec, as every payload is.
//
//	func MarkShipped(ctx context.Context, orderID int64) (int64, error) {
//		return engine.ExactlyOnce(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int64, error) {
//			_, err := tx.Exec(ctx, "UPDATE stock SET n = n - 1 WHERE sku = $1", sku)
//			return orderID, err
//		})
//	}
func ExactlyOnce[T any](ctx context.Context, db TxBeginner, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var out T
	key := activity.GetInfo(ctx).IdempotencyKey
	if key == "" {
		return out, ErrNoIdempotencyKey
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		claimed, raw, err := postgres.ClaimEffect(ctx, tx, key)
		if err != nil || !claimed {
			if err == nil && len(raw) > 0 {
				p, err := codec.Unwrap(codecFromContext(ctx), raw)
				if err != nil {
					return fmt.Errorf("recorded result: %w", err)
				}
				return json.Unmarshal(p, &out)
			}
			return err
		}
		v, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return activity.Permanent(fmt.Errorf("encode result: %w", err))
		}
		if b, err = codec.Wrap(codecFromContext(ctx), b); err != nil {
			return err
		}
		if err := postgres.RecordEffect(ctx, tx, key, b); err != nil {
			return err
		}
		out = v
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("exactly once (key %s): %w", key, err)
	}
	return out, nil
}

// codecKey carries the engine's codec in an activity's context, for
// ExactlyOnce.
type codecKey struct{}

func withCodecContext(ctx context.Context, c codec.PayloadCodec) context.Context {
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, codecKey{}, c)
}

func codecFromContext(ctx context.Context) codec.PayloadCodec {
	c, _ := ctx.Value(codecKey{}).(codec.PayloadCodec)
	return c
}
