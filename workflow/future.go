package workflow

import (
	"encoding/json"
	"fmt"
)

// Future is the eventual result of an asynchronous workflow operation, such
// as an activity or a timer.
type Future[T any] interface {
	// Get blocks the calling coroutine until the result is there and returns
	// it. It may be called more than once.
	Get(ctx Context) (T, error)
	// IsReady reports whether Get would return without blocking.
	IsReady() bool
}

// future is the untyped state behind a Future.
type future struct {
	name     string // what it waits for, for errors
	activity string // the activity's name, for an activity's future
	child    string // the child's workflow ID, for a child workflow's future
	seq      int64  // the command's sequence number
	detached bool   // created on a disconnected context: not canceled with the run
	ready    bool
	value    json.RawMessage
	err      error
}

func (f *future) settle(v json.RawMessage, err error) {
	f.ready, f.value, f.err = true, v, err
}

type typedFuture[T any] struct{ f *future }

func (t typedFuture[T]) IsReady() bool { return t.f.ready }

func (t typedFuture[T]) Get(ctx Context) (T, error) {
	var v T
	if !t.f.ready {
		ctx.exec().d.await(func() bool { return t.f.ready })
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
