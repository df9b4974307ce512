package workflow

import (
	"time"

	"github.com/durable-go/durable/history"
)

// NewTimer starts a durable timer that fires after d, by the workflow's clock,
// and returns a future that is ready when it fires. The timer is a row in the
// database: while the run waits, no worker, goroutine or memory is held for it.
// A timer of zero or negative duration is ready at once.
func NewTimer(ctx Context, d time.Duration) Future[struct{}] {
	x := ctx.exec()
	f := &future{name: "timer"}
	if d <= 0 {
		f.settle(nil, nil)
		return typedFuture[struct{}]{f}
	}
	seq := x.nextSeq()
	x.futures[seq] = f
	x.command(history.TimerStarted{Seq: seq, FireAt: x.now.Add(d)})
	return typedFuture[struct{}]{f}
}

// Sleep blocks the calling coroutine for d, durably: the run may be evicted
// from memory, the worker restarted, and it still wakes after d.
func Sleep(ctx Context, d time.Duration) error {
	_, err := NewTimer(ctx, d).Get(ctx)
	return err
}
