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
