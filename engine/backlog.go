package engine

import (
	"sync"

	"github.com/durable-go/durable/internal/store"
)

// backlogMax bounds each queue's backlog; past it the oldest entries go
// (their tasks stay in the queue for any worker).
const backlogMax = 4096

// backlogShare makes every backlogShare-th claim that has a backlog leave
// one slot to the queue's oldest tasks, so that tasks in no engine's
// backlog (of a stopped engine, or retries) are not held back by busy
// engines that always have their own.
const backlogShare = 16

// activityBacklog is, per queue, the activities this engine scheduled on a
// queue it serves but could not hand off for want of a free slot, oldest
// first. Their runs are cached here, so this engine's claims take them
// before the queue's other tasks: an activity claimed by another engine
// would finish there, where its run is not cached, and cost a separate
// outcome write, a claim, a history read and a replay. It is a preference,
// not a claim: another engine may take them first, and an entry whose task
// is gone is passed over.
type activityBacklog struct {
	mu     sync.Mutex
	queues map[string]*queueBacklog
}

type queueBacklog struct {
	keys   []store.ActivityKey
	claims int // claims made with entries
}

func newActivityBacklog() *activityBacklog {
	return &activityBacklog{queues: map[string]*queueBacklog{}}
}

// push adds the run's activities to their queues' backlogs.
func (b *activityBacklog) push(runID string, acts []store.NewActivityTask) {
	if len(acts) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range acts {
		q := b.queues[a.Queue]
		if q == nil {
			q = &queueBacklog{}
			b.queues[a.Queue] = q
		}
		if len(q.keys) == backlogMax {
			q.keys = q.keys[1:]
		}
		q.keys = append(q.keys, store.ActivityKey{RunID: runID, Seq: a.Seq})
	}
}

// take removes and returns the oldest entries of queue for a claim of n
// tasks: n of them, or n-1 every backlogShare-th time.
func (b *activityBacklog) take(queue string, n int) []store.ActivityKey {
	keys, _ := b.takeIfAny(queue, n)
	return keys
}

// takeIfAny is take that also reports whether the queue has a backlog: a
// slot about to become free claims only then.
func (b *activityBacklog) takeIfAny(queue string, n int) (keys []store.ActivityKey, had bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[queue]
	if q == nil || len(q.keys) == 0 {
		return nil, false
	}
	q.claims++
	if q.claims%backlogShare == 0 {
		n--
	}
	n = min(n, len(q.keys))
	keys = make([]store.ActivityKey, n)
	copy(keys, q.keys)
	q.keys = q.keys[n:]
	if len(q.keys) == 0 {
		q.keys = nil // let the array go
	}
	return keys, true
}
