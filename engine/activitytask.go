package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/actctx"
	"github.com/durable-go/durable/internal/backlog"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/workers"
)

// claimActivityTasks claims ready tasks of the activities this engine has,
// those in its backlog first.
func (e *Engine) claimActivityTasks(ctx context.Context, queue string, n int) ([]store.ActivityTask, error) {
	types := e.registered(false)
	if len(types) == 0 {
		return nil, nil
	}
	keys, share := e.backlog.Take(queue, n)
	return e.store.ClaimActivityTasks(ctx, e.activityClaim(queue, n, e.dueNow(), types, keys, share))
}

// activityClaim is this engine's claim of up to n tasks of types on queue
// at now: first one of the queue's oldest if share, then the backlog's keys
// (held back from other engines, so taken early: backlog.Hold), then the
// queue's oldest. keys and share come from the backlog's take.
func (e *Engine) activityClaim(queue string, n int, now time.Time, types []string, keys []store.ActivityKey, share bool) store.ClaimParams {
	return store.ClaimParams{Queue: queue, WorkerID: e.opts.WorkerID, Limit: n, Now: now,
		Types: types, Prefer: keys, PreferEarly: backlog.Hold, OldestFirst: share}
}

// runActivityTask runs one attempt of an activity and records its outcome:
// the result, a retry, or the final failure. If recording it scheduled the
// run's next activity and claimed it for this slot (a fused step), it
// returns that task: the slot runs it next.
func (e *Engine) runActivityTask(ctx context.Context, t store.ActivityTask, s *workers.Slot) (next *store.ActivityTask) {
	attrs := activityAttrs(t)
	opts, err := decodeActivityOptions(t.Options)
	if err != nil {
		return e.finishActivity(ctx, t, attrs, activity.Permanent(fmt.Errorf("decode options of activity %s: %w", t.Activity, err)), opts, s)
	}
	opts = opts.WithDefaults()
	def := e.activityDef(t.Activity)
	if def == nil {
		return e.finishActivity(ctx, t, attrs, fmt.Errorf("activity %q is not registered on worker %s: register it, or route its queue %q to workers that have it", t.Activity, e.opts.WorkerID, t.Queue), opts, s)
	}
	if t.MaxAttempts > 0 && t.Attempt > t.MaxAttempts {
		// The last attempt's lease ran out (its worker died or stalled).
		err := &timeoutError{kind: "lease", d: leaseOf(opts), err: fmt.Errorf("attempt %d did not finish and no attempts are left", t.Attempt-1)}
		return e.resolveFailed(ctx, t, attrs, err, "timeout", t.Attempt-1, s)
	}
	if err := e.startedTooLate(t, opts); err != nil {
		return e.resolveFailed(ctx, t, attrs, err, "timeout", 0, s)
	}
	timeout := opts.StartToCloseTimeout
	if s2c := opts.ScheduleToCloseTimeout; s2c > 0 {
		left := t.ScheduledAt.Add(s2c).Sub(e.now())
		if left <= 0 {
			err := &timeoutError{kind: "schedule-to-close", d: s2c, err: fmt.Errorf("scheduled at %s", t.ScheduledAt.Format(time.RFC3339))}
			return e.resolveFailed(ctx, t, attrs, err, "timeout", t.Attempt-1, s)
		}
		timeout = min(timeout, left)
	}
	out, ok, err := e.attempt(ctx, t, def, opts, timeout, attrs, nil)
	if !ok {
		return nil
	}
	return e.recordAttempt(ctx, t, attrs, out, err, opts, s)
}

// activityAttrs are the log attributes of an activity attempt.
func activityAttrs(t store.ActivityTask) []slog.Attr {
	attrs := []slog.Attr{slog.String("activity", t.Activity), slog.Int64("task_id", t.ID), slog.Int("attempt", t.Attempt)}
	if t.RunID != "" {
		attrs = append(attrs, slog.String("run_id", t.RunID))
	}
	return attrs
}

// activityDef returns the registered activity, or nil.
func (e *Engine) activityDef(name string) *activityDef {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.activities[name]
}

// attempt calls activity def for attempt t, cut short after timeout, by a
// missed heartbeat or by a lost claim, and returns what it returned. ok is
// false when there is nothing to record: the attempt lost its claim, or
// shutdown cut it short (Run then gives the task back without spending the
// attempt). ahead is set for an attempt that started before its schedule
// committed (see runahead.go).
func (e *Engine) attempt(ctx context.Context, t store.ActivityTask, def *activityDef, opts activity.Options, timeout time.Duration,
	attrs []slog.Attr, ahead *runAhead) (out json.RawMessage, ok bool, err error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := time.AfterFunc(timeout, func() { cancel(&timeoutError{kind: "start-to-close", d: timeout, err: context.DeadlineExceeded}) })
	defer deadline.Stop()
	if ahead != nil {
		defer context.AfterFunc(ahead.dropped, func() { cancel(errScheduleLost) })()
	}
	hb := &heartbeater{e: e, t: t, lease: leaseOf(opts), cancel: cancel, attrs: attrs, ahead: ahead}
	if opts.HeartbeatTimeout > 0 {
		hb.watch = newWatchdog(opts.HeartbeatTimeout, func() {
			cancel(&timeoutError{kind: "heartbeat", d: opts.HeartbeatTimeout, err: errors.New("no heartbeat")})
		})
		defer hb.watch.stop()
	}
	actx, span := e.startSpan(actx, t.TraceContext, "durable.activity",
		attribute.String("durable.activity", t.Activity), attribute.Int("durable.attempt", t.Attempt),
		attribute.String("durable.run.id", t.RunID), attribute.String("durable.idempotency_key", t.IdempotencyKey))
	began := time.Now()
	info := activity.Info{
		Name: t.Activity, IdempotencyKey: t.IdempotencyKey, Attempt: t.Attempt, Queue: t.Queue,
		WorkflowID: t.WorkflowID, RunID: t.RunID, Seq: t.Seq, HeartbeatDetails: t.Heartbeat,
		ScheduledTime: t.ScheduledAt, StartedTime: e.now(), Deadline: time.Now().Add(timeout),
		TaskToken: taskToken(t),
	}
	actx2 := activity.WithLogger(activity.NewContext(withCodecContext(actx, e.opts.Codec), info), e.log)
	actx2 = actctx.WithHeartbeatFunc(actx2, hb.beat)
	out, err = callActivity(actx2, def, t.Input)
	e.metrics.duration.WithLabelValues("activity", t.Activity).Observe(time.Since(began).Seconds())
	if err != nil {
		span.SetAttributes(attribute.String("durable.error_class", errorClass(err)))
	}
	endSpan(span, err)
	if cause := context.Cause(actx); err != nil && cause != nil && ctx.Err() == nil {
		var te *timeoutError
		if errors.As(cause, &te) {
			err = cause
		}
		if errors.Is(cause, errScheduleLost) {
			return nil, false, nil // runAheadAttempt logs it
		}
		if errors.Is(cause, activity.ErrCanceled) {
			if !opts.WaitForCancellation {
				return nil, false, nil // the heartbeat logged it; there is no one to report to
			}
			err = cause // the workflow waits for this attempt to acknowledge
		}
		if errors.Is(cause, store.ErrLeaseLost) {
			e.log.LogAttrs(ctx, slog.LevelWarn, "activity attempt lost its lease; another attempt owns the task", attrs...)
			return nil, false, nil
		}
	}
	if ctx.Err() != nil {
		// Cut short by shutdown: Run gives the task back, its attempt
		// unspent, and may have returned already. An activity that ignored
		// the cancellation and returned a result is not recorded either;
		// the task runs again.
		if err == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "activity returned a result after shutdown cancelled it; not recorded: the task was given back and runs again", attrs...)
		}
		return nil, false, nil
	}
	return out, true, err
}

// recordAttempt records what an attempt returned: its result, or what its
// error leads to (finishActivity).
func (e *Engine) recordAttempt(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, out json.RawMessage, err error,
	opts activity.Options, s *workers.Slot) *store.ActivityTask {
	if errors.Is(err, activity.ErrResultPending) {
		if err = e.awaitResult(ctx, t, attrs, opts); err == nil { // asyncactivity.go
			return nil
		}
	}
	if err != nil {
		return e.finishActivity(ctx, t, attrs, err, opts, s)
	}
	e.metrics.outcomes.WithLabelValues("activity", t.Activity, outcomeCompleted).Inc()
	return e.resolve(ctx, t, attrs, history.ActivityCompleted{Seq: t.Seq, Result: out, Attempt: t.Attempt}, s)
}

// heartbeater records an attempt's heartbeats: it keeps the details for the
// next attempt and extends the claim. Writes are spaced at least a fifth of
// the lease apart; the claim then always has most of its lease left.
type heartbeater struct {
	e      *Engine
	t      store.ActivityTask
	lease  time.Duration
	cancel context.CancelCauseFunc
	watch  *watchdog
	attrs  []slog.Attr

	mu   sync.Mutex
	last time.Time
	// ahead, until the attempt's schedule has committed, is the attempt
	// that started before it: there is no task to write to yet.
	ahead *runAhead
}

func (h *heartbeater) beat(ctx context.Context, details []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watch != nil {
		h.watch.reset()
	}
	if a := h.ahead; a != nil {
		// The task to write to is the schedule's: wait for it to commit,
		// within Options.ActivityRunAhead and a commit.
		select {
		case <-a.recorded:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if a.rec == nil {
			return fmt.Errorf("activity %s: its schedule did not commit; stop: %w", h.t.Activity, errScheduleLost)
		}
		h.t, h.attrs, h.ahead = *a.rec, activityAttrs(*a.rec), nil
	}
	if time.Since(h.last) < h.lease/5 {
		return nil
	}
	// The write must not fail because the attempt is being cut short.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.lease)
	defer cancel()
	err := h.e.store.HeartbeatActivity(wctx, store.HeartbeatParams{
		TaskID: h.t.ID, Attempt: h.t.Attempt, RunID: h.t.RunID, Seq: h.t.Seq,
		Details: details, LockedUntil: h.e.now().Add(h.lease),
	})
	if errors.Is(err, store.ErrActivityCanceled) {
		h.e.log.LogAttrs(ctx, slog.LevelInfo, "activity canceled: its workflow canceled it or closed; this attempt stops", h.attrs...)
		h.cancel(activity.ErrCanceled)
		return fmt.Errorf("activity %s attempt %d: %w", h.t.Activity, h.t.Attempt, activity.ErrCanceled)
	}
	if errors.Is(err, store.ErrLeaseLost) {
		h.e.metrics.staleWrites.WithLabelValues("heartbeat").Inc()
		h.e.log.LogAttrs(ctx, slog.LevelWarn, "heartbeat refused: the task was claimed again; this attempt stops", h.attrs...)
		h.cancel(store.ErrLeaseLost)
		return fmt.Errorf("activity %s attempt %d: the task was claimed again; stop: %w", h.t.Activity, h.t.Attempt, err)
	}
	if err != nil {
		h.e.log.LogAttrs(ctx, slog.LevelWarn, "record heartbeat", append(h.attrs, slog.String("error", err.Error()))...)
		return err
	}
	h.last = time.Now()
	return nil
}

// watchdog calls fn unless reset within d.
type watchdog struct {
	d time.Duration
	t *time.Timer
}

func newWatchdog(d time.Duration, fn func()) *watchdog {
	return &watchdog{d: d, t: time.AfterFunc(d, fn)}
}

func (w *watchdog) reset() { w.t.Reset(w.d) }
func (w *watchdog) stop()  { w.t.Stop() }

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

// timeoutError is an attempt cut short by one of the activity's timeouts.
type timeoutError struct {
	kind string // "start-to-close", "schedule-to-close", "schedule-to-start", "heartbeat", "lease"
	d    time.Duration
	err  error
}

func (t *timeoutError) Error() string {
	return fmt.Sprintf("%s timeout (%s): %v", t.kind, t.d, t.err)
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

// failurePlan decides what attempt t's failure with cause leads to: a
// retry, or (retry nil) the final failure, final, of class.
func (e *Engine) failurePlan(t store.ActivityTask, cause error, opts activity.Options) (retry *store.RetryActivityParams, final error, class string) {
	class = errorClass(cause)
	policy := opts.Retry.WithDefaults()
	now := e.now()
	retry = &store.RetryActivityParams{TaskID: t.ID, Attempt: t.Attempt, Error: store.EscapeText(cause.Error()), ErrorClass: class, Now: now}
	switch after, rateLimited := activity.RetryAfter(cause); {
	case errors.Is(cause, activity.ErrCanceled):
		return nil, cause, "canceled" // acknowledged: its workflow waits for it
	case activity.IsNonRetryable(cause) || slices.Contains(policy.NonRetryableErrorTypes, class):
		return nil, cause, class
	case rateLimited && t.RateLimited < policy.MaximumRateLimitedRetries:
		retry.RunAfter, retry.RateLimited = now.Add(after), true
	case t.MaxAttempts > 0 && t.Attempt >= t.MaxAttempts:
		// The task's budget: the policy's, plus rate-limited retries and
		// attempts given back on shutdown.
		return nil, cause, class
	default:
		retry.RunAfter = now.Add(policy.Delay(t.Attempt, e.opts.RandFunc))
	}
	if s2c := opts.ScheduleToCloseTimeout; s2c > 0 && retry.RunAfter.After(t.ScheduledAt.Add(s2c)) {
		return nil, &timeoutError{kind: "schedule-to-close", d: s2c, err: cause}, "timeout"
	}
	return retry, nil, class
}

// finishActivity decides what a failed attempt leads to: a retry on our
// schedule, a retry on the other side's schedule, or the final failure.
func (e *Engine) finishActivity(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, cause error, opts activity.Options, s *workers.Slot) *store.ActivityTask {
	retry, final, class := e.failurePlan(t, cause, opts)
	if retry == nil {
		return e.resolveFailed(ctx, t, attrs, final, class, t.Attempt, s)
	}
	e.metrics.outcomes.WithLabelValues("activity", t.Activity, outcomeFailedRetrying).Inc()
	e.log.LogAttrs(ctx, slog.LevelWarn, "activity attempt failed; retrying",
		append(attrs, slog.String("error", cause.Error()), slog.String("class", class), slog.Time("retry_at", retry.RunAfter))...)
	if err := e.store.RetryActivity(ctx, *retry); errors.Is(err, store.ErrActivityCanceled) {
		// Canceled while it ran, and its workflow waits for it: this
		// failure is its last.
		return e.resolveFailed(ctx, t, attrs, fmt.Errorf("%w after: %w", activity.ErrCanceled, cause), "canceled", t.Attempt, s)
	} else if err != nil {
		e.logLostWrite(ctx, "record activity retry", attrs, err)
		return nil
	}
	// Wake the queue's pollers: they look again and sleep until the retry
	// is due, instead of until the end of the lease they saw.
	e.hub.Publish(notify.ActivityTasks(t.Queue))
	return nil
}

func (e *Engine) resolveFailed(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, cause error, class string, attempts int, s *workers.Slot) *store.ActivityTask {
	return e.resolve(ctx, t, attrs, e.failedForGood(ctx, t, attrs, cause, class, attempts), s)
}

// failedForGood logs and counts the final failure of an activity, and
// returns its event.
func (e *Engine) failedForGood(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, cause error, class string, attempts int) history.ActivityFailed {
	e.log.LogAttrs(ctx, slog.LevelWarn, "activity failed for good",
		append(attrs, slog.String("error", cause.Error()), slog.String("class", class))...)
	e.metrics.outcomes.WithLabelValues("activity", t.Activity, outcomeFailedFinal).Inc()
	if t.RunID == "" { // a standalone job is kept as a dead letter
		e.metrics.outcomes.WithLabelValues("activity", t.Activity, outcomeDeadLettered).Inc()
	}
	// Escaped as the store records it, so that the run sees, live, the
	// message a replay reads back.
	f := store.EscapeFailure(history.Failure{Message: cause.Error(), Class: class, Attempts: attempts})
	withApplicationError(&f, cause)
	return history.ActivityFailed{Seq: t.Seq, Failure: f}
}

// withApplicationError records in f the type, details and retryability of
// the *activity.ApplicationError in cause's chain, if there is one. Details
// that jsonb cannot hold are dropped, and the message says so.
func withApplicationError(f *history.Failure, cause error) {
	ae, ok := errors.AsType[*activity.ApplicationError](cause)
	if !ok {
		return
	}
	f.Type, f.NonRetryable = store.EscapeText(ae.Type), ae.NonRetryable
	if len(ae.Details) == 0 {
		return
	}
	if !json.Valid(ae.Details) {
		f.Message += " (details dropped: they are not valid JSON)"
		return
	}
	if err := store.CheckPayload(ae.Details); err != nil {
		f.Message += store.EscapeText(fmt.Sprintf(" (details dropped: %v)", err))
		return
	}
	f.Details = ae.Details
}

// resolve records an activity's outcome. The outcome of a run's activity
// and the step it leads to take a step slot of the activity's queue if one
// is free (ActivityConcurrency of them), and the activity's slot goes back
// to its pool at once, free for the queue's next activity while the step
// commits; the task the step claims for the activity's slot then waits for
// one (reslot). Otherwise they run in the activity's slot, and so does
// that task.
func (e *Engine) resolve(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, ev history.Attributes, s *workers.Slot) (next *store.ActivityTask) {
	var own *workers.Semaphore // the activity's pool's, if the step traded its slot
	if t.RunID != "" && e.workflowPool(t.WorkflowQueue) != nil {
		if held, steps := s.Held, e.stepSlots(t.Queue); steps != nil && s.Trade(steps) {
			own = held
		}
	}
	if own != nil {
		defer func() {
			if next != nil {
				next = e.reslot(ctx, s, own, *next)
			}
		}()
	}
	if t.RunID != "" {
		var (
			handled bool
			then    *store.WorkflowTask
		)
		if handled, then, next = e.fuse(ctx, t, attrs, ev); handled {
			if then != nil {
				e.processWorkflowTask(ctx, *then)
			}
			return next
		}
	}
	// A task claimed for the slot by a refused fused step (next) is run
	// next all the same. The run's next workflow task is claimed by this
	// transaction and run here, in the step slot the outcome holds, or, if
	// it holds none, in a free workflow slot.
	in := store.ResolveActivityParams{RunID: t.RunID, TaskID: t.ID, Attempt: t.Attempt, Event: ev, Now: e.now()}
	var p *workers.Pool[store.WorkflowTask]
	if own == nil && t.RunID != "" {
		if p = e.workflowPool(t.WorkflowQueue); p == nil || !p.TryAcquire() {
			p = nil
		}
	}
	if own != nil || p != nil {
		in.ClaimAs, in.Lease = e.opts.WorkerID, e.opts.WorkflowTaskLease
	}
	ready, err := e.store.ResolveActivity(ctx, in)
	if _, done := ev.(history.ActivityCompleted); done && errors.Is(err, store.ErrUnstorable) {
		// The result cannot be stored, and never will be: the activity
		// fails for good with the reason, instead of running again at the
		// end of each lease.
		cause := activity.Permanent(fmt.Errorf("record result of activity %s: %w", t.Activity, err))
		in.Event = e.failedForGood(ctx, t, attrs, cause, errorClass(cause), t.Attempt)
		ready, err = e.store.ResolveActivity(ctx, in)
	}
	switch {
	case p != nil && len(ready.WorkflowTasks) == 1:
		p.Start(ready.WorkflowTasks[0])
	case p != nil:
		p.Release()
	}
	if err != nil {
		e.logLostWrite(ctx, "record activity outcome", attrs, err)
		return next
	}
	e.announce(ready)
	if own != nil && len(ready.WorkflowTasks) == 1 {
		e.processWorkflowTask(ctx, ready.WorkflowTasks[0])
	}
	return next
}

// reslot takes a slot of own, the pool the step's activity ran in, for
// next: the task a step claimed for that slot while it held a step slot
// (see resolve). The step slot goes back first. A slot that frees up goes
// to such a task before the pool's poller claims more, so the engine holds
// about twice ActivityConcurrency claims of the queue's activities at
// most. If none frees up within slotWait, next goes back to its queue, its
// attempt unspent, before its lease could run out waiting; reslot then
// returns nil.
func (e *Engine) reslot(ctx context.Context, s *workers.Slot, own *workers.Semaphore, next store.ActivityTask) *store.ActivityTask {
	s.Release()
	if own.AcquireWithin(ctx, slotWait(next.LockedUntil.Sub(e.now()))) {
		s.Held = own
		return &next
	}
	attrs := []slog.Attr{slog.String("activity", next.Activity), slog.Int64("task_id", next.ID), slog.String("run_id", next.RunID)}
	e.log.LogAttrs(ctx, slog.LevelDebug, "no activity slot freed up for the task a step claimed; it goes back to its queue", attrs...)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rel := store.ReleaseParams{WorkerID: e.opts.WorkerID, Now: e.now(), TaskID: next.ID, Attempt: next.Attempt}
	if err := e.store.ReleaseActivityTasks(rctx, rel); err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "give back an activity task claimed for a slot that did not free up; it runs when its lease ends",
			append(attrs, slog.String("error", err.Error()))...)
	}
	return nil
}

// slotWait is how long a task claimed for a slot, with lease left, waits
// for one: a tenth of the lease, at most a second.
func slotWait(lease time.Duration) time.Duration {
	return max(0, min(time.Second, lease/10))
}

// logLostWrite logs a write that did not happen. A lost lease is expected
// (another attempt owns the task now) and harmless; anything else means the
// attempt runs again when its lease ends.
func (e *Engine) logLostWrite(ctx context.Context, what string, attrs []slog.Attr, err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		e.metrics.staleWrites.WithLabelValues("activity_outcome").Inc()
		e.log.LogAttrs(ctx, slog.LevelWarn, what+": the claim is no longer ours (a late duplicate); ignored", attrs...)
		return
	}
	e.log.LogAttrs(ctx, slog.LevelWarn, what+"; the attempt runs again when its lease ends",
		append(attrs, slog.String("error", err.Error()))...)
}
