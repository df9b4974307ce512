package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/store"
)

// Asynchronous activity completion: an activity returns
// activity.ErrResultPending, and any process completes or fails it later,
// by its task token or by workflow ID and activity ID (its Seq).

// ErrActivityNotFound is returned for a completion, failure or heartbeat of
// an activity attempt that no longer waits for one: it was completed or
// failed already, its lease ran out and another attempt took over, its
// workflow closed, or there was no such activity.
var ErrActivityNotFound = errors.New("activity attempt not found: it completed already, or its attempt timed out and another took over")

// asyncHolder holds the claim of an attempt whose result comes later
// (store.HeartbeatParams.HandOff): no worker does, so none gives it back on
// shutdown, and 'durable workflow describe' shows it as its locked_by.
const asyncHolder = "async"

// tokenPrefix starts every task token, and names its version.
const tokenPrefix = "dt1."

// tokenFields is what a task token encodes: the attempt of the activity
// Seq of run RunID. TaskID is 0 for an attempt that started before its
// schedule committed (runahead.go).
type tokenFields struct {
	RunID   string `json:"r"`
	Seq     int64  `json:"s"`
	Attempt int    `json:"a"`
	TaskID  int64  `json:"t,omitempty"`
}

// taskToken is attempt t's task token: "dt1." and base64url of its fields
// as JSON. It is printable, so that it passes through URLs and the CLI.
func taskToken(t store.ActivityTask) []byte {
	if t.RunID == "" {
		return nil // standalone jobs do not complete asynchronously
	}
	b, _ := json.Marshal(tokenFields{RunID: t.RunID, Seq: t.Seq, Attempt: t.Attempt, TaskID: t.ID})
	return []byte(tokenPrefix + base64.RawURLEncoding.EncodeToString(b))
}

// parseToken reads a task token.
func parseToken(token []byte) (tokenFields, error) {
	var f tokenFields
	rest, ok := strings.CutPrefix(string(token), tokenPrefix)
	if !ok {
		return f, errors.New("invalid task token: pass activity.GetInfo(ctx).TaskToken as it is")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil && (f.RunID == "" || f.Attempt < 1) {
		err = errors.New("no run or attempt")
	}
	if err != nil {
		return f, fmt.Errorf("invalid task token (%v): pass activity.GetInfo(ctx).TaskToken as it is", err)
	}
	return f, nil
}

// awaitResult hands attempt t's claim off from this worker: the activity
// returned activity.ErrResultPending. The lease keeps running: with a
// heartbeat timeout it ends that long from now, otherwise where the claim
// put it (start-to-close from the attempt's start). A standalone job cannot
// wait: for one it returns the error its attempt fails with.
func (e *Engine) awaitResult(ctx context.Context, t store.ActivityTask, attrs []slog.Attr, opts activity.Options) error {
	if t.RunID == "" {
		return activity.Permanent(fmt.Errorf("job %s returned activity.ErrResultPending: only activities of a workflow can complete later; a job must return its result", t.Activity))
	}
	until := t.LockedUntil
	if opts.HeartbeatTimeout > 0 {
		until = e.now().Add(opts.HeartbeatTimeout)
	}
	err := e.store.HeartbeatActivity(context.WithoutCancel(ctx), store.HeartbeatParams{
		TaskID: t.ID, Attempt: t.Attempt, RunID: t.RunID, Seq: t.Seq, LockedUntil: until, HandOff: asyncHolder,
	})
	switch {
	case err == nil:
		e.log.LogAttrs(ctx, slog.LevelDebug, "activity result pending: it is completed later by its task token", attrs...)
	case errors.Is(err, store.ErrLeaseLost), errors.Is(err, store.ErrActivityCanceled):
		// Completed already (its token travels fast), canceled, or timed out.
		e.log.LogAttrs(ctx, slog.LevelDebug, "activity result pending, but the attempt no longer waits for it", attrs...)
	default:
		e.log.LogAttrs(ctx, slog.LevelWarn, "hand off an activity whose result is pending; it runs again when its lease ends",
			append(attrs, slog.String("error", err.Error()))...)
	}
	return nil
}

// CompleteActivity records result as the outcome of the activity attempt
// that token names (activity.GetInfo(ctx).TaskToken of an activity that
// returned activity.ErrResultPending), and wakes its workflow. Any engine
// may call it, one that runs no workers too. It succeeds once per attempt:
// afterwards, and once the attempt's lease has run out and another attempt
// took over, it returns ErrActivityNotFound, writing nothing.
func CompleteActivity[T any](ctx context.Context, e *Engine, token []byte, result T) error {
	f, err := parseToken(token)
	if err != nil {
		return fmt.Errorf("complete activity: %w", err)
	}
	return completeActivity(ctx, e, e.store, false, f, result)
}

// CompleteActivityByID is CompleteActivity for the activity activityID
// (activity.Info.Seq) of workflowID's open run, whatever its attempt, while
// an attempt waits for its result.
func CompleteActivityByID[T any](ctx context.Context, e *Engine, workflowID string, activityID int64, result T) error {
	f, err := e.byID(ctx, workflowID, activityID)
	if err != nil {
		return fmt.Errorf("complete activity: %w", err)
	}
	return completeActivity(ctx, e, e.store, false, f, result)
}

// FailActivity records cause as the failure of the activity attempt that
// token names, which then is retried per its RetryPolicy or fails for good,
// as if the attempt had returned cause (activity.Permanent and
// activity.NewApplicationError work as there). Errors as CompleteActivity.
func FailActivity(ctx context.Context, e *Engine, token []byte, cause error) error {
	f, err := parseToken(token)
	if err != nil {
		return fmt.Errorf("fail activity: %w", err)
	}
	return e.failActivity(ctx, f, cause)
}

// FailActivityByID is FailActivity for the activity activityID of
// workflowID's open run, as CompleteActivityByID.
func FailActivityByID(ctx context.Context, e *Engine, workflowID string, activityID int64, cause error) error {
	f, err := e.byID(ctx, workflowID, activityID)
	if err != nil {
		return fmt.Errorf("fail activity: %w", err)
	}
	return e.failActivity(ctx, f, cause)
}

// RecordActivityHeartbeat records a heartbeat, with details as JSON, of
// the activity attempt that token names, extending its lease by its
// HeartbeatTimeout (or StartToCloseTimeout without one). It returns
// ErrActivityNotFound as CompleteActivity does, and an error wrapping
// activity.ErrCanceled if the workflow canceled the activity or closed.
func RecordActivityHeartbeat(ctx context.Context, e *Engine, token []byte, details any) error {
	f, err := parseToken(token)
	if err != nil {
		return fmt.Errorf("record activity heartbeat: %w", err)
	}
	b, err := json.Marshal(details)
	if err != nil {
		return fmt.Errorf("record activity heartbeat: encode details: %w", err)
	}
	a, err := e.waiting(ctx, e.store, f)
	if err != nil {
		return fmt.Errorf("record activity heartbeat: %w", err)
	}
	opts, err := decodeActivityOptions(a.Options)
	if err != nil {
		return fmt.Errorf("record activity heartbeat: decode options of activity %s: %w", a.Activity, err)
	}
	err = e.store.HeartbeatActivity(ctx, store.HeartbeatParams{
		TaskID: a.TaskID, Attempt: f.Attempt, RunID: f.RunID, Seq: f.Seq, Details: b,
		LockedUntil: e.now().Add(leaseOf(opts.WithDefaults())),
	})
	switch {
	case errors.Is(err, store.ErrActivityCanceled):
		return fmt.Errorf("record activity heartbeat: activity %d of run %s: %w", f.Seq, f.RunID, activity.ErrCanceled)
	case errors.Is(err, store.ErrLeaseLost):
		return fmt.Errorf("record activity heartbeat: activity %d of run %s, attempt %d: %w", f.Seq, f.RunID, f.Attempt, ErrActivityNotFound)
	case err != nil:
		return fmt.Errorf("record activity heartbeat: %w", err)
	}
	return nil
}

// byID names the waiting attempt of activity seq of workflowID's open run.
func (e *Engine) byID(ctx context.Context, workflowID string, seq int64) (tokenFields, error) {
	r, err := e.store.GetRunByWorkflowID(ctx, workflowID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tokenFields{}, fmt.Errorf("workflow %q: %w", workflowID, ErrRunNotFound)
	case err != nil:
		return tokenFields{}, err
	case r.Status != store.StatusRunning:
		return tokenFields{}, fmt.Errorf("workflow %q: %w", workflowID, ErrRunClosed)
	}
	acts, err := e.store.ListPendingActivities(ctx, r.RunID)
	if err != nil {
		return tokenFields{}, err
	}
	for _, a := range acts {
		if a.Seq == seq && a.LockedBy != "" {
			return tokenFields{RunID: r.RunID, Seq: seq, Attempt: a.Attempts, TaskID: a.TaskID}, nil
		}
	}
	return tokenFields{}, fmt.Errorf("activity %d of workflow %q (run %s): no attempt waits for its result: %w", seq, workflowID, r.RunID, ErrActivityNotFound)
}

// waiting returns the task of the attempt f names, while it is held. The
// token of an attempt that started before its schedule committed (no task
// ID: runahead.go) may arrive first: its task is waited for, up to
// scheduleWait.
func (e *Engine) waiting(ctx context.Context, s store.Store, f tokenFields) (store.PendingActivity, error) {
	deadline := time.Now().Add(scheduleWait)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		acts, err := s.ListPendingActivities(ctx, f.RunID)
		if err != nil {
			return store.PendingActivity{}, err
		}
		i := slices.IndexFunc(acts, func(a store.PendingActivity) bool { return a.Seq == f.Seq })
		if i >= 0 {
			if a := acts[i]; a.Attempts == f.Attempt && a.LockedBy != "" && (f.TaskID == 0 || a.TaskID == f.TaskID) {
				return a, nil
			}
		}
		if i >= 0 || f.TaskID != 0 || time.Now().After(deadline) {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return store.PendingActivity{}, context.Cause(ctx)
		}
	}
	return store.PendingActivity{}, fmt.Errorf("activity %d of run %s, attempt %d: %w", f.Seq, f.RunID, f.Attempt, ErrActivityNotFound)
}

// scheduleWait is how long a completion waits for the schedule of an
// attempt that started before it committed.
const scheduleWait = 5 * time.Second

// completeActivity completes the attempt f names, in s: the engine's store,
// or, inTx, one bound to a caller's transaction.
func completeActivity(ctx context.Context, e *Engine, s store.Store, inTx bool, f tokenFields, result any) error {
	a, err := e.waiting(ctx, s, f)
	if err != nil {
		return fmt.Errorf("complete activity: %w", err)
	}
	payload, err := encodePayload(result, e.opts.MaxPayloadBytes, "result of activity "+a.Activity)
	if err != nil {
		return fmt.Errorf("complete activity %d of run %s: %w", f.Seq, f.RunID, err)
	}
	ev := history.ActivityCompleted{Seq: f.Seq, Result: payload, Attempt: f.Attempt}
	if err := e.resolveFromOutside(ctx, s, inTx, f, a.TaskID, ev); err != nil {
		return fmt.Errorf("complete activity: %w", err)
	}
	e.metrics.outcomes.WithLabelValues("activity", a.Activity, outcomeCompleted).Inc()
	return nil
}

// failActivity fails the attempt f names with cause: a retry, or the
// final failure, as finishActivity decides for an attempt that returned it.
func (e *Engine) failActivity(ctx context.Context, f tokenFields, cause error) error {
	if cause == nil {
		return errors.New("fail activity: nil error: give the reason it failed")
	}
	a, err := e.waiting(ctx, e.store, f)
	if err != nil {
		return fmt.Errorf("fail activity: %w", err)
	}
	opts, err := decodeActivityOptions(a.Options)
	if err != nil {
		return fmt.Errorf("fail activity: decode options of activity %s: %w", a.Activity, err)
	}
	t := store.ActivityTask{ID: a.TaskID, RunID: f.RunID, Seq: f.Seq, Activity: a.Activity, Queue: a.Queue,
		Attempt: f.Attempt, MaxAttempts: a.MaxAttempts, RateLimited: a.RateLimited, ScheduledAt: a.ScheduledAt}
	attrs := activityAttrs(t)
	retry, final, class := e.failurePlan(t, cause, opts.WithDefaults())
	if retry == nil {
		ev := e.failedForGood(ctx, t, attrs, final, class, t.Attempt)
		if err := e.resolveFromOutside(ctx, e.store, false, f, a.TaskID, ev); err != nil {
			return fmt.Errorf("fail activity: %w", err)
		}
		return nil
	}
	e.metrics.outcomes.WithLabelValues("activity", t.Activity, outcomeFailedRetrying).Inc()
	e.log.LogAttrs(ctx, slog.LevelWarn, "activity attempt failed from elsewhere; retrying",
		append(attrs, slog.String("error", cause.Error()), slog.String("class", class), slog.Time("retry_at", retry.RunAfter))...)
	switch err := e.store.RetryActivity(ctx, *retry); {
	case errors.Is(err, store.ErrLeaseLost):
		return fmt.Errorf("fail activity %d of run %s, attempt %d: %w", f.Seq, f.RunID, f.Attempt, ErrActivityNotFound)
	case err != nil:
		return fmt.Errorf("fail activity: %w", err)
	}
	e.publishReady(ctx, store.Ready{ActivityQueues: []string{t.Queue}})
	return nil
}

// resolveFromOutside records ev, the outcome of the held attempt f of task
// taskID, and wakes the run's workflow task: at once, or, in a caller's
// transaction, at its commit.
func (e *Engine) resolveFromOutside(ctx context.Context, s store.Store, inTx bool, f tokenFields, taskID int64, ev history.Attributes) error {
	ready, err := s.ResolveActivity(ctx, store.ResolveActivityParams{
		RunID: f.RunID, TaskID: taskID, Attempt: f.Attempt, Event: ev, Now: e.now(), Held: true,
	})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return fmt.Errorf("activity %d of run %s, attempt %d: %w", f.Seq, f.RunID, f.Attempt, ErrActivityNotFound)
	case err != nil:
		return err
	}
	if inTx {
		// At the commit, or not at all if it rolls back.
		if err := s.Notify(ctx, notify.ReadyNotes(store.Ready{WorkflowQueues: ready.WorkflowQueues})); err != nil {
			return fmt.Errorf("announce the workflow task of run %s at commit: %w", f.RunID, err)
		}
		return nil
	}
	e.publishReady(ctx, ready)
	return nil
}

// publishReady announces r: through the hub while it runs, otherwise at once.
func (e *Engine) publishReady(ctx context.Context, r store.Ready) {
	if e.hub.Active() {
		e.announce(r)
		return
	}
	e.hub.PublishNow(ctx, r)
}
