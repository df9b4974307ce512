package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/sqlite"
	"github.com/durable-go/durable/workflow"
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
	e.close, e.sq = s.Close, &sqliteBackend{store: s}
	return e, nil
}

// sqliteBackend is the SQLite store an engine runs on.
type sqliteBackend struct {
	store *sqlite.Store
	// txs are the stores of the SQLiteTx calls under way, by their
	// transaction.
	txs sync.Map
}

// SQLiteTx runs fn in one write transaction of a SQLite engine's file: the
// SQLite form of the calls that run in a caller's transaction. fn's own
// statements go through tx, and StartSQLTx, SignalSQLTx and EnqueueSQLTx
// given tx take effect with them when fn returns nil, or not at all; what
// they made ready is announced at the commit. Inside fn make every call
// through tx: a call of the engine's own (Start, say) waits for the file's
// one writer, which tx holds, until ctx ends.
func (e *Engine) SQLiteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if e.sq == nil {
		return errors.New("SQLiteTx: this engine's store is PostgreSQL: use StartTx, SignalTx and EnqueueTx with a pgx.Tx")
	}
	return e.sq.store.InTx(ctx, func(s store.Store) error {
		tx := s.(*sqlite.Store).Tx()
		e.sq.txs.Store(tx, e.layered(s))
		defer e.sq.txs.Delete(tx)
		return fn(tx)
	})
}

// inSQLiteTx returns the store of the SQLiteTx call whose transaction is
// tx, or an error naming call.
func (e *Engine) inSQLiteTx(call string, tx *sql.Tx) (store.Store, error) {
	if tx == nil {
		return nil, fmt.Errorf("%s: nil transaction", call)
	}
	if e.sq != nil {
		if s, ok := e.sq.txs.Load(tx); ok {
			return s.(store.Store), nil
		}
	}
	return nil, fmt.Errorf("%s: the transaction is not one of this engine's SQLiteTx calls under way: pass the tx SQLiteTx gives fn", call)
}

// StartSQLTx is Start inside the transaction of a SQLiteTx call: the run
// exists if and only if the transaction commits.
func StartSQLTx[In, Out any](ctx context.Context, e *Engine, tx *sql.Tx, wf func(workflow.Context, In) (Out, error), in In, o StartOptions) (*Run[Out], error) {
	s, err := e.inSQLiteTx("start workflow", tx)
	if err != nil {
		return nil, err
	}
	return start[Out](ctx, e, s, true, wf, in, o)
}

// SignalSQLTx is Signal inside the transaction of a SQLiteTx call: the
// signal is sent if and only if the transaction commits.
func SignalSQLTx[T any](ctx context.Context, e *Engine, tx *sql.Tx, workflowID, name string, v T) error {
	s, err := e.inSQLiteTx("signal", tx)
	if err != nil {
		return err
	}
	return sendSignal(ctx, e, s, true, workflowID, name, v)
}

// EnqueueSQLTx is Enqueue inside the transaction of a SQLiteTx call: the
// job exists if and only if the transaction commits.
func EnqueueSQLTx[In, Out any](ctx context.Context, e *Engine, tx *sql.Tx, fn func(context.Context, In) (Out, error), in In, o JobOptions) (Job, error) {
	s, err := e.inSQLiteTx("enqueue job", tx)
	if err != nil {
		return Job{}, err
	}
	return enqueue(ctx, e, s, true, fn, in, o)
}
