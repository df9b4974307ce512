// Package runcache keeps the executors of recently run workflows, so that
// a run's next task applies only its new events.
package runcache

import (
	"container/list"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
)

// Cache keeps the executors of recently run workflows, so the next task of
// a run applies only its new events. A task takes its run's executor out while
// it works and puts it back after committing; evicting is always safe, since
// a run can be rebuilt by replay.
type Cache struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used; values are *entry
	byRun map[string]*list.Element
}

type entry struct {
	task store.WorkflowTask // the run's last task: what the run is
	x    wfexec.Executor
	wake time.Time // when the run, which waits on timers only, wakes; zero if unknown
}

// New returns a cache of at most size runs.
func New(size int) *Cache {
	return &Cache{size: size, order: list.New(), byRun: map[string]*list.Element{}}
}

// Take removes and returns the run's executor and its last task, or nil.
func (c *Cache) Take(runID string) (wfexec.Executor, store.WorkflowTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byRun[runID]
	if !ok {
		return nil, store.WorkflowTask{}
	}
	c.order.Remove(el)
	delete(c.byRun, runID)
	ent := el.Value.(*entry)
	return ent.x, ent.task
}

// Has reports whether the run's executor is in the cache.
func (c *Cache) Has(runID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byRun[runID]
	return ok
}

// Put stores the executor of task t's run, closing whatever it pushes out,
// and reports whether it kept it. wake, if set, is when the run (which
// waits on timers only) wakes.
//
// A full cache pushes out its least recently used run, unless both that run
// and this one are asleep and that one wakes first: then it keeps that one
// and closes x. Runs that sleep for the same time go to sleep in the order
// they wake, so pushing out the least recently used one pushed out the run
// due next, every time: with 6% more sleepers than room (W3 at 20,000
// runs), nearly every run was evicted shortly before its wake and replayed
// (lateness p99 4.3 s against 0.1 s with room for all). Keeping the earliest
// wakes leaves only the overflow to replay.
func (c *Cache) Put(t store.WorkflowTask, x wfexec.Executor, wake time.Time) bool {
	runID := t.RunID
	if c.size <= 0 {
		x.Close()
		return false
	}
	var evicted []wfexec.Executor
	c.mu.Lock()
	if el, ok := c.byRun[runID]; ok { // cannot happen while tasks take first; be safe
		evicted = append(evicted, el.Value.(*entry).x)
		c.order.Remove(el)
		delete(c.byRun, runID)
	}
	for c.order.Len() >= c.size {
		el := c.order.Back()
		e := el.Value.(*entry)
		if !wake.IsZero() && !e.wake.IsZero() && !e.wake.After(wake) {
			c.mu.Unlock()
			for _, x := range append(evicted, x) {
				x.Close()
			}
			return false
		}
		c.order.Remove(el)
		delete(c.byRun, e.task.RunID)
		evicted = append(evicted, e.x)
	}
	c.byRun[runID] = c.order.PushFront(&entry{task: t, x: x, wake: wake})
	c.mu.Unlock()
	for _, x := range evicted {
		x.Close()
	}
	return true
}

// Clear closes every cached executor.
func (c *Cache) Clear() {
	c.mu.Lock()
	var all []wfexec.Executor
	for el := c.order.Front(); el != nil; el = el.Next() {
		all = append(all, el.Value.(*entry).x)
	}
	c.order.Init()
	clear(c.byRun)
	c.mu.Unlock()
	for _, x := range all {
		x.Close()
	}
}
