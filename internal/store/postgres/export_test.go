package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// HoldGroup turns group commit on for s without flushers: writes wait
// until the returned commit sends the n submitted by then as one group.
// commit returns how many of them statements for many writes did.
func (s *Store) HoldGroup(t *testing.T) (commit func(n int) (merged int)) {
	g := &grouper{s: s, reqs: make(chan *groupReq, 64), max: 64, running: true}
	s.group.Store(g)
	t.Cleanup(func() { s.group.CompareAndSwap(g, nil) })
	return func(n int) int {
		require.Eventually(t, func() bool { return len(g.reqs) == n }, 10*time.Second, time.Millisecond,
			"%d writes submitted", n)
		batch := make([]*groupReq, n)
		for i := range batch {
			batch[i] = <-g.reqs
		}
		before := g.merged.Load()
		g.commit(batch)
		return int(g.merged.Load() - before)
	}
}

// HoldStarts turns start grouping on for s (at most max per statement) as
// if a start were in flight: starts wait until the returned release, once
// n are waiting, commits them as the combiner would. release returns how
// many of them statements for many starts did.
func (s *Store) HoldStarts(t *testing.T, max int) (release func(n int) (merged int)) {
	s.GroupStarts(max)
	c := s.starts
	c.busy = true
	state := func() (pending int, busy bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending), c.busy
	}
	return func(n int) int {
		require.Eventually(t, func() bool { p, _ := state(); return p == n }, 10*time.Second, time.Millisecond,
			"%d starts waiting", n)
		c.next()
		require.Eventually(t, func() bool { _, busy := state(); return !busy }, 10*time.Second, time.Millisecond,
			"the starts committed")
		return int(c.g.merged.Load())
	}
}
