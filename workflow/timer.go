package workflow

import (
	"errors"
	"time"

	"github.com/durable-go/durable/history"
)

// ErrCanceled is the error of a future whose operation was canceled.
var ErrCanceled = errors.New("canceled")

// Timer is a durable timer. It is a Future[struct{}] that becomes ready when
// the timer fires, or fails with ErrCanceled when it is canceled first.
type Timer struct {
	f   *future
	x   *executor
	seq int64
}

// NewTimer starts a durable timer that fires after d, by the workflow's clock.
// The timer is a row in the database: while the run waits, no worker,
// goroutine or memory is held for it. A timer of zero or negative duration is
// ready at once.
//
// Use it in a Selector for "this, or a deadline":
//
//	timeout := workflow.NewTimer(ctx, time.Hour)
//	reply := workflow.ExecuteActivity(ctx, AskApprover, req)
//	workflow.NewSelector(ctx).
//		AddFuture(reply, func() { ... }).
//		AddFuture(timeout, func() { ... }).
//		Select(ctx)
//	timeout.Cancel()
func NewTimer(ctx Context, d time.Duration) *Timer {
	x := ctx.exec()
	t := &Timer{f: &future{name: "timer"}, x: x}
	if d <= 0 {
		t.f.settle(nil, nil)
		return t
	}
	if IsCanceled(ctx) {
		t.f.settle(nil, ErrCanceled)
		return t
	}
	t.seq = x.nextSeq()
	t.f.seq, t.f.detached = t.seq, ctx.detached
	x.futures[t.seq] = t.f
	x.command(history.TimerStarted{Seq: t.seq, FireAt: x.now.Add(d)})
	return t
}

// Get blocks the calling coroutine until the timer fires, and returns
// ErrCanceled if the timer is canceled first (by Cancel, or with the run,
// unless it was started on a disconnected context). Its value is always
// struct{}{}; it may be called more than once.
func (t *Timer) Get(ctx Context) (struct{}, error) {
	return typedFuture[struct{}]{t.f}.Get(ctx)
}

// IsReady reports whether the timer has fired or been canceled: Get would
// return without blocking.
func (t *Timer) IsReady() bool { return t.f.ready }

func (t *Timer) state() *future { return t.f }

// Cancel cancels the timer if it has not fired: the cancellation is
// recorded in history, the timer's row is removed, and the future fails with
// ErrCanceled. Canceling a fired or canceled timer does nothing.
func (t *Timer) Cancel() {
	if t.f.ready {
		return
	}
	delete(t.x.futures, t.seq)
	t.x.canceled[t.seq] = true
	t.x.command(history.TimerCanceled{Seq: t.seq})
	t.f.settle(nil, ErrCanceled)
}

// Sleep blocks the calling coroutine for d, durably: the run may be evicted
// from memory, the worker restarted, and it still wakes after d.
func Sleep(ctx Context, d time.Duration) error {
	_, err := NewTimer(ctx, d).Get(ctx)
	return err
}
