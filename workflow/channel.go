package workflow

import "time"

// Go starts fn in a new workflow coroutine. Coroutines take turns: exactly
// one runs at a time, in a deterministic order, so they need no locks. Use it
// instead of the go statement.
func Go(ctx Context, fn func(ctx Context)) {
	x := ctx.exec()
	child := ctx
	x.d.spawn("go", func() { fn(child) })
}

// Await blocks the calling coroutine until cond returns true. cond is
// re-evaluated whenever another coroutine has run or an event arrived; it
// must only read workflow state. It returns ErrCanceled if the run is
// canceled before cond holds (unless ctx is disconnected), and nil once
// cond holds.
func Await(ctx Context, cond func() bool) error {
	x := ctx.exec()
	if cond() {
		return nil
	}
	x.d.await(func() bool { return cond() || IsCanceled(ctx) })
	if !cond() {
		return ErrCanceled
	}
	return nil
}

// AwaitWithTimeout is Await with a durable deadline: it reports whether
// cond held before d passed (by the workflow's clock). The deadline is a
// timer, recorded in history and canceled when cond holds first. It
// returns ErrCanceled if the run is canceled first (unless ctx is
// disconnected).
//
//	ok, err := workflow.AwaitWithTimeout(ctx, 24*time.Hour, func() bool { return approved })
//	if err != nil {
//		return err // canceled
//	}
//	if !ok {
//		// a day passed without approval
//	}
func AwaitWithTimeout(ctx Context, d time.Duration, cond func() bool) (bool, error) {
	if cond() {
		return true, nil
	}
	deadline := NewTimer(ctx, d)
	err := Await(ctx, func() bool { return cond() || deadline.IsReady() })
	if cond() {
		deadline.Cancel()
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := deadline.Get(ctx); err != nil {
		return false, err // the timer was canceled with the run
	}
	return false, nil
}

// Channel passes values between workflow coroutines. Use it instead of a Go
// channel. An unbuffered channel's Send waits until a receiver has taken the
// value.
type Channel[T any] struct {
	x        *executor
	size     int
	buf      []T
	closed   bool
	sent     int64 // values ever sent
	received int64 // values ever received
}

// NewChannel returns an unbuffered channel.
func NewChannel[T any](ctx Context) *Channel[T] {
	return &Channel[T]{x: ctx.exec()}
}

// NewBufferedChannel returns a channel that holds up to size values before
// Send blocks.
func NewBufferedChannel[T any](ctx Context, size int) *Channel[T] {
	return &Channel[T]{x: ctx.exec(), size: size}
}

// Send puts v on the channel, blocking while the buffer is full (or, for an
// unbuffered channel, until a receiver takes it). Sending on a closed channel
// panics, as in Go.
func (c *Channel[T]) Send(ctx Context, v T) {
	if c.closed {
		panic("workflow: send on closed channel")
	}
	if c.size > 0 && len(c.buf) >= c.size {
		c.x.d.await(func() bool { return len(c.buf) < c.size || c.closed })
		if c.closed {
			panic("workflow: send on closed channel")
		}
	}
	c.buf = append(c.buf, v)
	c.sent++
	if c.size == 0 {
		ticket := c.sent
		Await(ctx, func() bool { return c.received >= ticket })
	}
}

// Receive takes the next value, blocking until there is one. ok is false when
// the channel is closed and drained.
func (c *Channel[T]) Receive(ctx Context) (v T, ok bool) {
	Await(ctx, c.ready)
	return c.ReceiveAsync()
}

// ReceiveAsync takes the next value if there is one, without blocking.
func (c *Channel[T]) ReceiveAsync() (v T, ok bool) {
	if len(c.buf) == 0 {
		return v, false
	}
	v = c.buf[0]
	var zero T
	c.buf[0] = zero
	c.buf = c.buf[1:]
	c.received++
	return v, true
}

// Len returns the number of values waiting in the channel.
func (c *Channel[T]) Len() int { return len(c.buf) }

// Close closes the channel: receivers drain what is left, then get ok false.
func (c *Channel[T]) Close() { c.closed = true }

func (c *Channel[T]) ready() bool { return len(c.buf) > 0 || c.closed }

// Selector waits for the first of several futures or channels to be ready,
// like a select statement. Cases are checked in the order they were added,
// so the choice is deterministic.
type Selector struct {
	x     *executor
	cases []*selectCase
	dflt  func()
}

type selectCase struct {
	ready func() bool
	fire  func()
	once  bool // a future case fires once
	done  bool
}

// NewSelector returns an empty Selector.
func NewSelector(ctx Context) *Selector {
	return &Selector{x: ctx.exec()}
}

// AnyChannel is a channel of any element type that a [Selector] can
// receive from: what [Selector.AddReceive] takes. Every *[Channel] and
// [SignalChannel] is one; a [Future] is not (use [Selector.AddFuture]).
type AnyChannel interface {
	// IsReady reports whether Receive would not block.
	IsReady() bool
	receivable()
}

// IsReady reports whether Receive would not block.
func (c *Channel[T]) IsReady() bool { return c.ready() }

func (c *Channel[T]) receivable() {}

// AddFuture adds a case that fires fn once f is ready; fn should call f's
// Get. Each future case fires at most once, however often Select is called.
// f is any [Future] or *[Timer].
func (s *Selector) AddFuture(f AnyFuture, fn func()) *Selector {
	s.cases = append(s.cases, &selectCase{ready: f.IsReady, fire: fn, once: true})
	return s
}

// AddReceive adds a case that fires fn when ch has a value (or is closed);
// fn should receive it. ch is a *[Channel] or a [SignalChannel]. The case
// fires each time Select finds a value waiting.
func (s *Selector) AddReceive(ch AnyChannel, fn func()) *Selector {
	s.cases = append(s.cases, &selectCase{ready: ch.IsReady, fire: fn})
	return s
}

// AddDefault sets fn to run when no case is ready at Select.
func (s *Selector) AddDefault(fn func()) *Selector {
	s.dflt = fn
	return s
}

// Select blocks until a case is ready, then runs that case's function. With a
// default, it never blocks.
func (s *Selector) Select(ctx Context) {
	pick := func() *selectCase {
		for _, c := range s.cases {
			if !c.done && c.ready() {
				return c
			}
		}
		return nil
	}
	c := pick()
	if c == nil && s.dflt != nil {
		s.dflt()
		return
	}
	if c == nil {
		Await(ctx, func() bool { return pick() != nil })
		c = pick()
	}
	if c.once {
		c.done = true
	}
	c.fire()
}

// HasPending reports whether a case could still fire.
func (s *Selector) HasPending() bool {
	for _, c := range s.cases {
		if !c.done {
			return true
		}
	}
	return false
}
