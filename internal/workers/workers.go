// Package workers holds the engine's worker pools: a pool runs tasks of
// one kind from one queue in a bounded number of slots, and a slot can be
// traded for one of another pool's.
package workers

import (
	"context"
	"sync"
	"time"
)

// Pool runs tasks of one kind from one queue, at most cap of its
// semaphore at a time. Tasks come from its poller, or are handed off by a
// transaction that claimed them for this worker (a completion claiming the
// run's next workflow task, a workflow task claiming the activities it
// scheduled).
type Pool[T any] struct {
	*Semaphore
	hard  context.Context
	tasks *sync.WaitGroup
	// work runs a task in slot s, which holds a slot of this pool; it may
	// Trade it for another pool's (see Engine.resolve). It may return
	// another task for the slot to run next: s then holds a slot of this
	// pool again.
	work func(ctx context.Context, t T, s *Slot) (next *T)
}

func NewPool[T any](hard context.Context, tasks *sync.WaitGroup, slots int, work func(context.Context, T, *Slot) *T) *Pool[T] {
	return &Pool[T]{Semaphore: NewSemaphore(slots), hard: hard, tasks: tasks, work: work}
}

// Start runs t in a reserved slot. It must be called by a task of the same
// engine or by the pool's poller, so that Run's wait has not finished.
func (p *Pool[T]) Start(t T) {
	p.Run(func(ctx context.Context, s *Slot) *T { return p.work(ctx, t, s) })
}

// Run runs fn in a reserved slot, then the tasks it returns for the slot,
// as Start does.
func (p *Pool[T]) Run(fn func(ctx context.Context, s *Slot) (next *T)) {
	p.tasks.Add(1)
	go func() {
		defer p.tasks.Done()
		s := &Slot{Held: p.Semaphore}
		defer s.Release()
		for next := fn(p.hard, s); next != nil; {
			next = p.work(p.hard, *next, s)
		}
	}()
}

// Semaphore counts a pool's busy slots. A slot given back goes to a task
// waiting for one in AcquireWithin, if there is one, before the poller: a
// task already claimed runs before the next claim.
type Semaphore struct {
	slots  chan struct{} // one element per busy Slot
	direct chan struct{} // unbuffered: a Slot passed from release to a waiter
}

func NewSemaphore(n int) *Semaphore {
	return &Semaphore{slots: make(chan struct{}, n), direct: make(chan struct{})}
}

// TryAcquire reserves a slot if one is free.
func (p *Semaphore) TryAcquire() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Acquire reserves a slot, waiting for one to free up; it returns false
// if ctx ends first.
func (p *Semaphore) Acquire(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// Cap is how many slots there are.
func (p *Semaphore) Cap() int { return cap(p.slots) }

// AcquireWithin reserves a slot, waiting up to d for one to free up.
func (p *Semaphore) AcquireWithin(ctx context.Context, d time.Duration) bool {
	if p.TryAcquire() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return true
	case <-p.direct:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (p *Semaphore) HasFree() bool { return len(p.slots) < cap(p.slots) }

// TryAcquireUpTo reserves free slots, at most n, and returns how many.
func (p *Semaphore) TryAcquireUpTo(n int) int {
	got := 0
	for got < n && p.TryAcquire() {
		got++
	}
	return got
}

// Release gives back a slot: to a task waiting in AcquireWithin, or to the
// pool.
func (p *Semaphore) Release() {
	select {
	case p.direct <- struct{}{}:
	default:
		<-p.slots
	}
}

// ReleaseN gives back n slots.
func (p *Semaphore) ReleaseN(n int) {
	for range n {
		p.Release()
	}
}

// Slot is what a running task holds: a slot of its pool, one of another
// pool it traded it for, or none (Held is nil). Its goroutine releases it
// when it ends.
type Slot struct{ Held *Semaphore }

// Trade holds a free slot of p instead of the one s holds, and reports
// whether there was one.
func (s *Slot) Trade(p *Semaphore) bool {
	if !p.TryAcquire() {
		return false
	}
	s.Release()
	s.Held = p
	return true
}

// Release gives back the slot s holds, if any.
func (s *Slot) Release() {
	if s.Held != nil {
		s.Held.Release()
		s.Held = nil
	}
}
