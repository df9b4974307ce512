// Package batch runs requests that overlap in time together, on the
// callers' goroutines.
package batch

import (
	"slices"
	"sync"
)

// Batcher runs requests through a function that takes many at once. The
// first request when none is running runs at once and alone, on its
// caller's goroutine, so an idle process adds no wait; requests that arrive
// while a batch runs wait and go together (at most max each) in the next,
// on a goroutine that lives only while requests are waiting. A Batcher
// needs no goroutine of its own and nothing to stop it. Its zero value is
// not usable; see New.
//
// Run returns once it has handed the request over, which may be before it
// has run: the request carries its own way to report back (a channel).
type Batcher[T any] struct {
	run func([]T)
	max int

	mu      sync.Mutex
	busy    bool // a batch is running
	pending []T
}

// New returns a Batcher that runs batches of at most size requests (at
// least 1) with run.
func New[T any](size int, run func([]T)) *Batcher[T] {
	return &Batcher[T]{run: run, max: max(size, 1)}
}

// Run runs t alone now if no batch is running, else queues it for the next.
func (b *Batcher[T]) Run(t T) {
	b.mu.Lock()
	if b.busy {
		b.pending = append(b.pending, t)
		b.mu.Unlock()
		return
	}
	b.busy = true
	b.mu.Unlock()
	b.run([]T{t})
	b.next()
}

// Hold makes b act as if a batch were running until Release: requests
// queue. Tests use it to make requests overlap.
func (b *Batcher[T]) Hold() {
	b.mu.Lock()
	b.busy = true
	b.mu.Unlock()
}

// Waiting returns how many requests are queued.
func (b *Batcher[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// Release ends a Hold: the queued requests run.
func (b *Batcher[T]) Release() { b.next() }

// next runs the queued requests, at most max, on a goroutine that goes on
// until none is left; with none queued, b is idle again.
func (b *Batcher[T]) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.busy = false
		return
	}
	n := min(len(b.pending), b.max)
	batch := slices.Clone(b.pending[:n])
	b.pending = slices.Delete(b.pending, 0, n)
	go func() {
		b.run(batch)
		b.next()
	}()
}

// Idle reports whether no batch is running and none is queued.
func (b *Batcher[T]) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.busy
}
