package engine

import (
	"container/list"
	"sync"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
)

// runCache keeps the executors of recently run workflows, so the next task of
// a run applies only its new events. A task takes its run's executor out while
// it works and puts it back after committing; evicting is always safe, since
// a run can be rebuilt by replay.
type runCache struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used; values are *cacheEntry
	byRun map[string]*list.Element
}

type cacheEntry struct {
	task store.WorkflowTask // the run's last task: what the run is
	x    wfexec.Executor
}

func newRunCache(size int) *runCache {
	return &runCache{size: size, order: list.New(), byRun: map[string]*list.Element{}}
}

// take removes and returns the run's executor and its last task, or nil.
func (c *runCache) take(runID string) (wfexec.Executor, store.WorkflowTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byRun[runID]
	if !ok {
		return nil, store.WorkflowTask{}
	}
	c.order.Remove(el)
	delete(c.byRun, runID)
	ent := el.Value.(*cacheEntry)
	return ent.x, ent.task
}

// put stores the executor of task t's run, closing whatever it pushes out.
func (c *runCache) put(t store.WorkflowTask, x wfexec.Executor) {
	runID := t.RunID
	if c.size <= 0 {
		x.Close()
		return
	}
	var evicted []wfexec.Executor
	c.mu.Lock()
	if el, ok := c.byRun[runID]; ok { // cannot happen while tasks take first; be safe
		evicted = append(evicted, el.Value.(*cacheEntry).x)
		c.order.Remove(el)
	}
	c.byRun[runID] = c.order.PushFront(&cacheEntry{task: t, x: x})
	for c.order.Len() > c.size {
		el := c.order.Back()
		e := el.Value.(*cacheEntry)
		c.order.Remove(el)
		delete(c.byRun, e.task.RunID)
		evicted = append(evicted, e.x)
	}
	c.mu.Unlock()
	for _, x := range evicted {
		x.Close()
	}
}

// clear closes every cached executor.
func (c *runCache) clear() {
	c.mu.Lock()
	var all []wfexec.Executor
	for el := c.order.Front(); el != nil; el = el.Next() {
		all = append(all, el.Value.(*cacheEntry).x)
	}
	c.order.Init()
	clear(c.byRun)
	c.mu.Unlock()
	for _, x := range all {
		x.Close()
	}
}
