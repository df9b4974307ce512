package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

func (e *Engine) claimActivityTasks(ctx context.Context, queue string, n int) ([]store.ActivityTask, error) {
	return e.store.ClaimActivityTasks(ctx, store.ClaimParams{Queue: queue, WorkerID: e.opts.WorkerID, Limit: n, Now: e.now()})
}

// runActivityTask runs one attempt of an activity and records its outcome:
// the result, a retry, or the final failure.
func (e *Engine) runActivityTask(ctx context.Context, t store.ActivityTask) {
	attrs := []slog.Attr{slog.String("activity", t.Activity), slog.Int64("task_id", t.ID), slog.Int("attempt", t.Attempt)}
	if t.RunID != "" {
		attrs = append(attrs, slog.String("run_id", t.RunID))
	}
	var opts activity.Options
	if len(t.Options) > 0 {
		if err := json.Unmarshal(t.Options, &opts); err != nil {
			e.finishActivity(ctx, t, attrs, activity.Permanent(fmt.Errorf("decode options of activity %s: %w", t.Activity, err)), opts)
			return
		}
	}
	opts = opts.WithDefaults()
	e.mu.RLock()
	def := e.activities[t.Activity]
	e.mu.RUnlock()
	if def == nil {
		e.finishActivity(ctx, t, attrs, fmt.Errorf("activity %q is not registered on worker %s: register it, or route its queue %q to workers that have it", t.Activity, e.opts.WorkerID, t.Queue), opts)
		return
	}
	if t.MaxAttempts > 0 && t.Attempt > t.MaxAttempts {
		// The last attempt's lease ran out (its worker died or stalled).
		err := fmt.Errorf("activity %s: the lease of attempt %d ran out (start-to-close timeout %s) and no attempts are left", t.Activity, t.Attempt-1, opts.StartToCloseTimeout)
		e.resolveFailed(ctx, t, attrs, err, "timeout", t.Attempt-1)
		return
	}
	actx, cancel := context.WithTimeout(ctx, opts.StartToCloseTimeout)
	info := activity.Info{
		Name: t.Activity, IdempotencyKey: t.IdempotencyKey, Attempt: t.Attempt, Queue: t.Queue,
		WorkflowID: t.WorkflowID, RunID: t.RunID, HeartbeatDetails: t.Heartbeat,
	}
	info.Deadline, _ = actx.Deadline()
	out, err := callActivity(activity.NewContext(actx, info), def, t.Input)
	if err != nil && actx.Err() != nil && ctx.Err() == nil && errors.Is(err, actx.Err()) {
		err = &timeoutError{err: err, d: opts.StartToCloseTimeout}
	}
	cancel()
	if err != nil {
		e.finishActivity(ctx, t, attrs, err, opts)
		return
	}
	e.resolve(ctx, t, attrs, history.ActivityCompleted{Seq: t.Seq, Result: out, Attempt: t.Attempt})
}

// callActivity runs the activity, turning a panic into an error.
func callActivity(ctx context.Context, def *activityDef, input json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: string(debug.Stack())}
		}
	}()
	return def.run(ctx, input)
}

type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string {
	return fmt.Sprintf("activity panicked: %v\n%s", p.value, p.stack)
}

type timeoutError struct {
	err error
	d   interface{ String() string }
}

func (t *timeoutError) Error() string {
	return fmt.Sprintf("start-to-close timeout (%s): %v", t.d, t.err)
}
func (t *timeoutError) Unwrap() error { return t.err }

// errorClass names the kind of an activity's error for records and for
// RetryPolicy.NonRetryableErrorTypes.
func errorClass(err error) string {
	var te *timeoutError
	var pe *panicError
	switch {
	case errors.As(err, &te):
		return "timeout"
	case errors.As(err, &pe):
		return "panic"
	}
	return activity.ErrorClass(err)
}

// finishActivity decides what a failed attempt leads to: a retry on our
// schedule, a retry on the other side's schedule, or the final failure.
func (e *Engine) finishActivity(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, cause error, opts activity.Options) {
	class := errorClass(cause)
	policy := opts.Retry.WithDefaults()
	now := e.now()
	retry := store.RetryActivityParams{TaskID: t.ID, Attempt: t.Attempt, Error: cause.Error(), Now: now}
	switch after, rateLimited := activity.RetryAfter(cause); {
	case activity.IsPermanent(cause) || slices.Contains(policy.NonRetryableErrorTypes, class):
		e.resolveFailed(ctx, t, attrs, cause, class, t.Attempt)
		return
	case rateLimited && t.RateLimited < policy.MaximumRateLimitedRetries:
		retry.RunAfter, retry.RateLimited = now.Add(after), true
	case policy.MaximumAttempts > 0 && t.Attempt >= policy.MaximumAttempts:
		e.resolveFailed(ctx, t, attrs, cause, class, t.Attempt)
		return
	default:
		retry.RunAfter = now.Add(policy.Delay(t.Attempt, nil))
	}
	e.log.LogAttrs(ctx, slog.LevelWarn, "activity attempt failed; retrying",
		append(attrs, slog.String("error", cause.Error()), slog.String("class", class), slog.Time("retry_at", retry.RunAfter))...)
	if err := e.store.RetryActivity(ctx, retry); err != nil {
		e.logLostWrite(ctx, "record activity retry", attrs, err)
	}
}

func (e *Engine) resolveFailed(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, cause error, class string, attempts int) {
	e.log.LogAttrs(ctx, slog.LevelWarn, "activity failed for good",
		append(attrs, slog.String("error", cause.Error()), slog.String("class", class))...)
	f := history.Failure{Message: cause.Error(), Class: class, Attempts: attempts}
	e.resolve(ctx, t, attrs, history.ActivityFailed{Seq: t.Seq, Failure: f})
}

func (e *Engine) resolve(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, ev history.Attributes) {
	ready, err := e.store.ResolveActivity(ctx, store.ResolveActivityParams{TaskID: t.ID, Attempt: t.Attempt, Event: ev, Now: e.now()})
	if err != nil {
		e.logLostWrite(ctx, "record activity outcome", attrs, err)
		return
	}
	e.announce(ready)
}

// logLostWrite logs a write that did not happen. A lost lease is expected
// (another attempt owns the task now) and harmless; anything else means the
// attempt runs again when its lease ends.
func (e *Engine) logLostWrite(ctx context.Context, what string, attrs []slog.Attr, err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		e.log.LogAttrs(ctx, slog.LevelWarn, what+": the claim is no longer ours (a late duplicate); ignored", attrs...)
		return
	}
	e.log.LogAttrs(ctx, slog.LevelWarn, what+"; the attempt runs again when its lease ends",
		append(attrs, slog.String("error", err.Error()))...)
}
