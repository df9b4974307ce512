package runcache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
)

// closedExecutor records whether the cache closed it.
type closedExecutor struct {
	wfexec.Executor
	closed bool
}

func (x *closedExecutor) Close() { x.closed = true }

// A full cache pushes out its least recently used run, except that between
// two sleeping runs it keeps the one that wakes first.
func TestFullCacheKeepsTheRunsThatWakeFirst(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	c := New(2)
	put := func(runID string, wake time.Time) (*closedExecutor, bool) {
		x := &closedExecutor{}
		return x, c.Put(store.WorkflowTask{RunID: runID}, x, wake)
	}
	cached := func(runID string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.byRun[runID]
		return ok
	}

	a, _ := put("a", at(1))
	b, _ := put("b", at(2))
	late, kept := put("late", at(3))
	require.False(t, kept, "both cached runs wake before it")
	require.True(t, late.closed)
	require.False(t, a.closed || b.closed)

	_, kept = put("early", at(0))
	require.True(t, kept, "it wakes before a, the least recently used")
	require.True(t, a.closed)
	require.True(t, cached("b") && cached("early"))

	_, kept = put("busy", time.Time{}) // waits on an activity: when it goes on is not known
	require.True(t, kept)
	require.True(t, b.closed, "b was the least recently used")
	_, kept = put("sleeper", at(9))
	require.False(t, kept, "the least recently used run (early) wakes first")

	x, _ := c.Take("early") // it wakes
	require.NotNil(t, x)
	_, kept = put("s5", at(5))
	require.True(t, kept, "there is room")
	busy := c.byRun["busy"].Value.(*entry).x.(*closedExecutor)
	_, kept = put("s1", at(1))
	require.True(t, kept, "the least recently used run (busy) is pushed out: when it goes on is not known")
	require.True(t, busy.closed)
	require.True(t, cached("s5") && cached("s1"))
}
