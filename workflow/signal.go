package workflow

import (
	"encoding/json"
	"fmt"
)

// SignalChannel receives the signals sent to the run under one name, in the
// order they were sent. Signals sent before the workflow asks for them wait
// in history; none is lost.
type SignalChannel[T any] struct {
	x    *executor
	name string
}

// GetSignalChannel returns the channel of the signals named name, whose
// payloads decode into T.
func GetSignalChannel[T any](ctx Context, name string) SignalChannel[T] {
	return SignalChannel[T]{x: ctx.exec(), name: name}
}

// IsReady reports whether a signal is waiting: Receive would not block.
func (c SignalChannel[T]) IsReady() bool { return len(c.x.signals[c.name]) > 0 }

func (c SignalChannel[T]) receivable() {}

// Receive blocks the calling coroutine until a signal arrives and returns
// it. It returns ErrCanceled if the run is canceled while it waits (unless
// ctx is disconnected).
func (c SignalChannel[T]) Receive(ctx Context) (T, error) {
	Await(ctx, func() bool { return c.IsReady() || IsCanceled(ctx) })
	v, ok, err := c.ReceiveAsync()
	if !ok && err == nil {
		err = ErrCanceled
	}
	return v, err
}

// ReceiveAsync takes a waiting signal without blocking; ok is false when
// none is waiting. err reports a payload that does not decode into T.
func (c SignalChannel[T]) ReceiveAsync() (v T, ok bool, err error) {
	q := c.x.signals[c.name]
	if len(q) == 0 {
		return v, false, nil
	}
	raw := q[0]
	c.x.signals[c.name] = q[1:]
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, true, fmt.Errorf("signal %q: decode into %T: %w", c.name, v, err)
	}
	return v, true, nil
}
