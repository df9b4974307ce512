// Package backlog keeps, per queue, the activities an engine scheduled but
// could not hand to a free slot of its own, so that its next claims name
// them first (their runs are cached there). It is a preference, not a
// claim: another engine may take them, and an entry whose task is gone is
// passed over.
package backlog

import (
	"slices"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/store"
)

// maxEntries bounds each queue's backlog; past it the oldest entries go
// (their tasks stay in the queue for any worker).
const maxEntries = 4096

// Hold is how long the activities in an engine's backlog are held
// back from other engines: they are written ready Hold after they
// were scheduled, and the engine's claims, which name them, take them
// before that (store.ClaimParams.PreferEarly). An activity that another
// engine takes finishes where its run is not cached: its outcome is
// written alone, and the run's next task reads the whole history and
// replays it, wherever it is claimed. With two engines under load that was
// one activity in seven (docs/performance.md, history, 2026-12-01 at 1d99ce2). After Hold,
// an engine with a free slot takes them all the same, so a busy or stopped
// engine's backlog still moves.
const Hold = time.Second

// shareEvery makes every shareEvery-th claim that has a backlog take one
// of the queue's oldest ready tasks first, so that tasks in no engine's
// backlog (of a stopped engine, retries, jobs) are not held back by busy
// engines that always have their own. If there is none, the slot takes a
// backlog task all the same: it used to be left to the queue, and stayed
// empty while the backlog was held (docs/performance.md, history, 2026-12-01 at 1d99ce2).
const shareEvery = 16

// Backlog is, per queue, the activities the engine scheduled on a
// queue it serves but could not hand off for want of a free slot, oldest
// first. Their runs are cached here, so the engine's claims take them
// before the queue's other tasks: an activity claimed by another engine
// would finish there, where its run is not cached, and cost a separate
// outcome write, a claim, a history read and a replay. It is a preference,
// not a claim: another engine may take them first, and an entry whose task
// is gone is passed over.
type Backlog struct {
	mu     sync.Mutex
	queues map[string]*queueEntries
	// ready, if set, is called with a queue when the activities pushed on
	// it until Hold ago have become ready for every engine: those
	// whose entries were taken by a claim that did not get them, or dropped,
	// wait for no one's next poll.
	ready func(queue string)
	// pushed, if set, is called with each queue a Push added to, once the
	// entries are in: the engine's own pollers claim them by name at once.
	// A poller that was claiming while the activities found no free slot
	// (its claim held them) would otherwise sleep until the queue's next
	// due time, the end of the hold: a second.
	pushed func(queue string)
}

type queueEntries struct {
	keys   []store.ActivityKey
	claims int  // claims made with entries
	armed  bool // a timer calls ready within Hold
	pushed bool // pushed since the timer was set
}

// New returns an empty backlog. ready, if not nil, is called with a queue
// when the activities pushed on it until Hold ago have become ready for
// every engine (see Backlog.ready); pushed, if not nil, with each queue a
// Push added to (see Backlog.pushed).
func New(ready, pushed func(queue string)) *Backlog {
	return &Backlog{queues: map[string]*queueEntries{}, ready: ready, pushed: pushed}
}

// Push adds the run's activities to their queues' backlogs.
func (b *Backlog) Push(runID string, acts []store.NewActivityTask) {
	if len(acts) == 0 {
		return
	}
	var queues []string // the queues pushed to, each once
	for _, a := range acts {
		if !slices.Contains(queues, a.Queue) {
			queues = append(queues, a.Queue)
		}
	}
	if b.pushed != nil {
		defer func() { // once the entries are in, and b.mu released
			for _, q := range queues {
				b.pushed(q)
			}
		}()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range acts {
		q := b.queues[a.Queue]
		if q == nil {
			q = &queueEntries{}
			b.queues[a.Queue] = q
		}
		if len(q.keys) == maxEntries {
			q.keys = q.keys[1:]
		}
		q.keys = append(q.keys, store.ActivityKey{RunID: runID, Seq: a.Seq})
	}
	if b.ready == nil {
		return
	}
	for _, name := range queues { // a push's activities share their queue's timer
		// Their hold ends before now+Hold: it began when the commit
		// that wrote them was made.
		if q := b.queues[name]; q.armed {
			q.pushed = true
		} else {
			q.armed = true
			b.armReady(name, q)
		}
	}
}

// armReady calls b.ready for the queue Hold from now, and again after
// each Hold in which more was pushed. b.mu is held.
func (b *Backlog) armReady(queue string, q *queueEntries) {
	q.pushed = false
	time.AfterFunc(Hold, func() {
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

// Take removes and returns the oldest entries of queue for a claim of n
// tasks, at most n. Every shareEvery-th time it also says the claim should
// take one of the queue's oldest ready tasks first (store.ClaimParams.OldestFirst).
func (b *Backlog) Take(queue string, n int) (keys []store.ActivityKey, share bool) {
	keys, share, _ = b.TakeIfAny(queue, n)
	return keys, share
}

// TakeIfAny is Take that also reports whether the queue has a backlog: a
// slot about to become free claims only then.
func (b *Backlog) TakeIfAny(queue string, n int) (keys []store.ActivityKey, share, had bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[queue]
	if q == nil || len(q.keys) == 0 {
		return nil, false, false
	}
	q.claims++
	share = q.claims%shareEvery == 0
	n = min(n, len(q.keys))
	keys = make([]store.ActivityKey, n)
	copy(keys, q.keys)
	q.keys = q.keys[n:]
	if len(q.keys) == 0 {
		q.keys = nil // let the array go
	}
	return keys, share, true
}

// Keys returns a copy of queue's entries, oldest first.
func (b *Backlog) Keys(queue string) []store.ActivityKey {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[queue]; q != nil {
		return slices.Clone(q.keys)
	}
	return nil
}
