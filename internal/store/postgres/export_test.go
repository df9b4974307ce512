package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/batch"
	"github.com/durable-go/durable/internal/store"
)

// HoldGroup turns group commit on for s without flushers: writes wait
// until the returned commit sends the n submitted by then as one group.
// commit returns how many of them statements for many writes did; the
// store's pool must count them (CountManyWrites).
func (s *Store) HoldGroup(t *testing.T) (commit func(n int) (merged int)) {
	await, send := s.HoldGroupApart(t)
	return func(n int) int {
		await(n)
		return send(n)
	}
}

// HoldGroupApart is HoldGroup in two parts, for a group sent while the test
// goes on: await returns once n writes are submitted (call it from the
// test's goroutine), and send then sends them as one group.
func (s *Store) HoldGroupApart(t *testing.T) (await func(n int), send func(n int) (merged int)) {
	g := &grouper{s: s, reqs: make(chan *groupReq, 64), max: 64, running: true}
	s.group.Store(g)
	t.Cleanup(func() { s.group.CompareAndSwap(g, nil) })
	await = func(n int) {
		require.Eventually(t, func() bool { return len(g.reqs) == n }, 10*time.Second, time.Millisecond,
			"%d writes submitted", n)
	}
	send = func(n int) int {
		batch := make([]*groupReq, n)
		for i := range batch {
			batch[i] = <-g.reqs
		}
		before := s.manyWrites()
		g.commit(batch)
		return int(s.manyWrites() - before)
	}
	return await, send
}

// HoldStarts turns batching on for s (at most max per statement) as if a
// start were in flight: starts wait until the returned release, once n are
// waiting, commits them as the batcher would. release returns how many of
// them statements for many starts did.
func (s *Store) HoldStarts(t *testing.T, max int) (release func(n int) (merged int)) {
	s.Batch(max)
	return hold(t, s, s.starts)
}

// HoldReads is HoldStarts for GetRun.
func (s *Store) HoldReads(t *testing.T, max int) (release func(n int) (merged int)) {
	s.Batch(max)
	return hold(t, s, s.reads)
}

func hold[T any](t *testing.T, s *Store, b *batch.Batcher[T]) func(n int) int {
	b.Hold()
	return func(n int) int {
		require.Eventually(t, func() bool { return b.Waiting() == n }, 10*time.Second, time.Millisecond,
			"%d calls waiting", n)
		before := s.manyWrites()
		b.Release()
		require.Eventually(t, b.Idle, 10*time.Second, time.Millisecond, "the calls done")
		return int(s.manyWrites() - before)
	}
}

// IndexPlans are the planner settings every engine statement runs with,
// local to its transaction.
const IndexPlans = indexPlans

// ClaimActivityStatement returns the statement ClaimActivityTasks runs for
// in, with positional parameters, and its arguments.
func ClaimActivityStatement(in store.ClaimParams) (sql string, args []any, err error) {
	return claimActivityArgs(in).RewriteQuery(context.Background(), nil, claimActivityTasksSQL, nil)
}

// ClaimSettings are the settings of a workflow-task claim's transaction.
const ClaimSettings = indexPlansNoFlush

// RunAllWith runs the statements queue adds in one transaction with the
// given settings, as the store runs its own.
func (s *Store) RunAllWith(ctx context.Context, settings string, queue func(b *pgx.Batch)) error {
	return s.runAllWith(ctx, settings, queue)
}

// CountManyWrites makes a pool count the writes its statements for many
// do (see manyStmt): the rows those statements return, one per write, or,
// for the read of many runs, one per run found. The Hold functions report
// them.
func CountManyWrites(cfg *pgxpool.Config) {
	c := &manyCounter{sqls: map[string]bool{getRunsSQL: true}}
	for _, m := range []*manyStmt{createRunMany, createRunFirstMany, commitStepMany,
		fusedStepMany[0], fusedStepMany[1], fusedCloseMany[0], fusedCloseMany[1]} {
		c.sqls[m.sql] = true
	}
	for sql := range c.sqls { // a batch's statements are traced rewritten to $n
		compiled, err := compileNamed(sql)
		if err != nil {
			panic(err)
		}
		c.sqls[compiled.sql] = true
	}
	cfg.ConnConfig.Tracer = c
}

// manyWrites is what the pool's manyCounter has counted, or 0 if its pool
// does not count.
func (s *Store) manyWrites() int64 {
	if c, ok := s.pool.Config().ConnConfig.Tracer.(*manyCounter); ok {
		return c.n.Load()
	}
	return 0 // the test does not count them
}

// manyCounter is a pgx tracer that counts the rows of statements for many.
type manyCounter struct {
	sqls map[string]bool
	n    atomic.Int64
}

type tracedSQL struct{}

func (c *manyCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tracedSQL{}, d.SQL)
}

func (c *manyCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(tracedSQL{}).(string); d.Err == nil && c.sqls[sql] {
		c.n.Add(d.CommandTag.RowsAffected())
	}
}

func (c *manyCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *manyCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err == nil && c.sqls[d.SQL] {
		c.n.Add(d.CommandTag.RowsAffected())
	}
}

func (c *manyCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
