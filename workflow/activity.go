package workflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/durable-go/durable/history"
)

// ExecuteActivity schedules the activity fn with input in and returns a
// future for its result. The call itself does not block; Get on the future
// does. The activity runs on a worker of its queue, at least once, with the
// options it was registered with, overridden by those set on ctx with
// [WithActivityOptions].
//
// If the activity fails for good (a permanent error, or its retries are
// spent), Get returns an *ActivityError.
func ExecuteActivity[In, Out any](ctx Context, fn func(context.Context, In) (Out, error), in In) Future[Out] {
	x := ctx.exec()
	name, opts := x.opts.ResolveActivity(fn)
	if ctx.ao != nil {
		opts = opts.Merge(*ctx.ao)
	}
	opts = opts.WithDefaults()
	input, err := json.Marshal(in)
	if err != nil {
		return failedFuture[Out](name, fmt.Errorf("encode input of activity %s: %w", name, err))
	}
	encoded, err := encodeOptions(opts)
	if err != nil {
		return failedFuture[Out](name, fmt.Errorf("encode options of activity %s: %w", name, err))
	}
	if IsCanceled(ctx) {
		return failedFuture[Out](name, ErrCanceled)
	}
	seq := x.nextSeq()
	f := &future{name: "activity " + name, activity: name, seq: seq, detached: ctx.detached, waitCancel: opts.WaitForCancellation}
	x.futures[seq] = f
	x.command(history.ActivityScheduled{Seq: seq, Activity: name, Queue: opts.Queue, Input: input, Options: encoded})
	return typedFuture[Out]{f}
}

// ActivityError is what a workflow receives when an activity failed for good.
// Inspect it with errors.As.
type ActivityError struct {
	// Activity is the activity's registered name.
	Activity string
	// Message is the last attempt's error text.
	Message string
	// Class is the error's kind: "permanent", "rate_limited", "timeout", or
	// the Go type of the activity's error.
	Class string
	// Attempts is how many attempts ran.
	Attempts int
}

func (e *ActivityError) Error() string {
	return fmt.Sprintf("activity %s failed after %d attempt(s) (%s): %s", e.Activity, e.Attempts, e.Class, e.Message)
}
