package workflow

import (
	"encoding/json"
	"fmt"
)

// Future is the eventual result of an asynchronous workflow operation, such
// as an activity or a timer. Only this package makes futures: the engine
// settles them from the run's history.
type Future[T any] interface {
	// Get blocks the calling coroutine until the result is there and returns
	// it. It may be called more than once. Waiting for a child workflow, it
	// returns ErrCanceled if the run is canceled meanwhile (unless ctx is
	// disconnected); the child's parent-close policy says what happens to it.
	Get(ctx Context) (T, error)
	// IsReady reports whether Get would return without blocking.
	IsReady() bool
	state() *future
}

// AnyFuture is a [Future] of any result type: what [Selector.AddFuture]
// takes. Every Future is one, a *[Timer] and a [ChildWorkflowFuture]
// included; a [Channel] or [SignalChannel] is not (use [Selector.AddReceive]).
type AnyFuture interface {
	// IsReady reports whether Get would return without blocking.
	IsReady() bool
	state() *future
}

// future is the untyped state behind a Future.
type future struct {
	name     string  // what it waits for, for errors
	activity string  // the activity's name, for an activity's future
	child    string  // the child's workflow ID, for a child workflow's future
	started  *future // a child's start, for GetChildWorkflowExecution
	// waitCancel is set for an activity with WaitForCancellation;
	// cancelWaiting once its cancel is requested: its outcome then settles
	// it with ErrCanceled.
	waitCancel, cancelWaiting bool
	// external and externalRun name the target of a signal or cancel
	// request to another workflow.
	external, externalRun string
	seq                   int64 // the command's sequence number
	detached              bool  // created on a disconnected context: not canceled with the run
	ready                 bool
	value                 json.RawMessage
	err                   error
}

func (f *future) settle(v json.RawMessage, err error) {
	f.ready, f.value, f.err = true, v, err
}

type typedFuture[T any] struct{ f *future }

func (t typedFuture[T]) IsReady() bool { return t.f.ready }

func (t typedFuture[T]) state() *future { return t.f }

func (t typedFuture[T]) Get(ctx Context) (T, error) {
	var v T
	if !t.f.ready {
		// A child's future is not canceled with the run (its parent-close
		// policy decides what the child does), but a parent waiting for
		// it on a context that is canceled stops waiting.
		canceled := func() bool { return t.f.child != "" && IsCanceled(ctx) }
		ctx.exec().d.await(func() bool { return t.f.ready || canceled() })
		if !t.f.ready {
			return v, ErrCanceled
		}
	}
	if t.f.err != nil {
		return v, t.f.err
	}
	if len(t.f.value) > 0 {
		if err := json.Unmarshal(t.f.value, &v); err != nil {
			return v, fmt.Errorf("decode result of %s into %T: %w", t.f.name, v, err)
		}
	}
	return v, nil
}

// failedFuture returns a ready future holding err.
func failedFuture[T any](name string, err error) Future[T] {
	f := &future{name: name}
	f.settle(nil, err)
	return typedFuture[T]{f}
}
