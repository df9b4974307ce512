package postgres

import (
	"context"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
)

// combiner groups a process's starts as the grouper groups steps: the
// starts that arrive while one of its transactions is in flight are
// committed together in the next one, as one statement. Unlike the grouper
// it has no flushers of its own, so it also works in an engine that never
// runs (an API server, where most starts come from): the first caller
// commits its own start at once and alone (no added latency when idle),
// and whatever arrived meanwhile goes as one batch on a goroutine that
// lives only while starts are waiting.
type combiner struct {
	g   *grouper // its commit; it runs no flushers
	max int

	mu      sync.Mutex
	busy    bool // a transaction is in flight
	pending []*groupReq
}

// GroupStarts makes CreateRun calls for runs without a first task (starts
// by an engine that will not run the first task itself) that overlap share
// statements and commits, at most max each, whether or not group commit
// runs. max 1 or less turns it off. Call it before the store is used.
func (s *Store) GroupStarts(max int) {
	if max <= 1 {
		s.starts = nil
		return
	}
	s.starts = &combiner{g: &grouper{s: s}, max: max}
}

// startRun runs the createRunSQL write whose arguments are args, combined
// with concurrent ones when GroupStarts is on and the store is not bound to
// a caller's transaction. key (the workflow ID) orders a batch's writes (commit
// sorts them), so that two batches wait for each other's workflow IDs in
// one order.
func (s *Store) startRun(ctx context.Context, key string, args namedArgs, scan func(pgx.Row) error) error {
	c := s.starts
	if c == nil || s.db != dbtx(s.pool) {
		return scan(s.db.QueryRow(ctx, createRunSQL, args))
	}
	r := &groupReq{ctx: ctx, key: key, sql: createRunSQL, args: args, scan: scan, many: createRunMany, done: make(chan error, 1)}
	c.mu.Lock()
	if c.busy {
		c.pending = append(c.pending, r)
		c.mu.Unlock()
		return <-r.done
	}
	c.busy = true
	c.mu.Unlock()
	c.g.commit([]*groupReq{r})
	c.next()
	return <-r.done
}

// next commits the starts that arrived during the last transaction, at most
// max, on a goroutine that goes on until none is left; with none waiting,
// the combiner is idle again.
func (c *combiner) next() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		c.busy = false
		return
	}
	n := min(len(c.pending), c.max)
	batch := slices.Clone(c.pending[:n])
	c.pending = slices.Delete(c.pending, 0, n)
	go func() {
		c.g.commit(batch)
		c.next()
	}()
}
