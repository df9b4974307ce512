package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/batch"
	"github.com/durable-go/durable/internal/store"
)

// HoldGroup turns group commit on for s without flushers: writes wait
// until the returned commit sends the n submitted by then as one group.
// commit returns how many of them statements for many writes did.
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
		before := s.merged.Load()
		g.commit(batch)
		return int(s.merged.Load() - before)
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
		before := s.merged.Load()
		b.Release()
		require.Eventually(t, b.Idle, 10*time.Second, time.Millisecond, "the calls done")
		return int(s.merged.Load() - before)
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
