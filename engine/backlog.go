package engine

import (
	"slices"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/store"
)

// backlogMax bounds each queue's backlog; past it the oldest entries go
// (their tasks stay in the queue for any worker).
const backlogMax = 4096

// backlogHold is how long the activities in an engine's backlog are held
// back from other engines: they are written ready backlogHold after they
// were scheduled, and this engine's claims, which name them, take them
// before that (store.ClaimParams.PreferEarly). An activity that another
// engine takes finishes where its run is not cached: its outcome is
// written alone, and the run's next task reads the whole history and
// replays it, wherever it is claimed. With two engines under load that was
// one activity in seven (docs/performance.md, history, 2026-12-01 at 1d99ce2). After backlogHold,
// an engine with a free slot takes them all the same, so a busy or stopped
// engine's backlog still moves.
const backlogHold = time.Second

// backlogShare makes every backlogShare-th claim that has a backlog take one
// of the queue's oldest ready tasks first, so that tasks in no engine's
// backlog (of a stopped engine, retries, jobs) are not held back by busy
// engines that always have their own. If there is none, the slot takes a
// backlog task all the same: it used to be left to the queue, and stayed
// empty while the backlog was held (docs/performance.md, history, 2026-12-01 at 1d99ce2).
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
	// ready, if set, is called with a queue when the activities pushed on
	// it until backlogHold ago have become ready for every engine: those
	// whose entries were taken by a claim that did not get them, or dropped,
	// wait for no one's next poll.
	ready func(queue string)
}

type queueBacklog struct {
	keys   []store.ActivityKey
	claims int  // claims made with entries
	armed  bool // a timer calls ready within backlogHold
	pushed bool // pushed since the timer was set
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
	if b.ready == nil {
		return
	}
	for i, a := range acts {
		if slices.ContainsFunc(acts[:i], func(o store.NewActivityTask) bool { return o.Queue == a.Queue }) {
			continue // this push's activities share their queue's timer
		}
		// Their hold ends before now+backlogHold: it began when the commit
		// that wrote them was made.
		if q := b.queues[a.Queue]; q.armed {
			q.pushed = true
		} else {
			q.armed = true
			b.armReady(a.Queue, q)
		}
	}
}

// armReady calls b.ready for the queue backlogHold from now, and again after
// each backlogHold in which more was pushed. b.mu is held.
func (b *activityBacklog) armReady(queue string, q *queueBacklog) {
	q.pushed = false
	time.AfterFunc(backlogHold, func() {
		b.mu.Lock()
		if q.pushed {
			b.armReady(queue, q)
		} else {
			q.armed = false
		}
		b.mu.Unlock()
		b.ready(queue)
	})
}

// take removes and returns the oldest entries of queue for a claim of n
// tasks, at most n. Every backlogShare-th time it also says the claim should
// take one of the queue's oldest ready tasks first (store.ClaimParams.OldestFirst).
func (b *activityBacklog) take(queue string, n int) (keys []store.ActivityKey, share bool) {
	keys, share, _ = b.takeIfAny(queue, n)
	return keys, share
}

// takeIfAny is take that also reports whether the queue has a backlog: a
// slot about to become free claims only then.
func (b *activityBacklog) takeIfAny(queue string, n int) (keys []store.ActivityKey, share, had bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[queue]
	if q == nil || len(q.keys) == 0 {
		return nil, false, false
	}
	q.claims++
	share = q.claims%backlogShare == 0
	n = min(n, len(q.keys))
	keys = make([]store.ActivityKey, n)
	copy(keys, q.keys)
	q.keys = q.keys[n:]
	if len(q.keys) == 0 {
		q.keys = nil // let the array go
	}
	return keys, share, true
}
