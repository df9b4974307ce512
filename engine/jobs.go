package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/store"
)

// JobOptions configure one standalone job.
type JobOptions struct {
	// Key is the job's idempotency key: while a job with the key is pending
	// (or retrying), enqueuing the key again returns that job. It is what
	// activity.GetInfo(ctx).IdempotencyKey reports. Default: a random UUID.
	Key string
	// RunAt delays the job until then (by the engine's clock).
	RunAt time.Time
	// RunAfter delays the job by this long. Ignored when RunAt is set.
	RunAfter time.Duration
	// Activity overrides the options the activity was registered with,
	// field by field, as workflow.WithActivityOptions does.
	Activity activity.Options
}

// Job is a handle on an enqueued standalone job.
type Job struct {
	// ID is the job's task ID.
	ID int64
	// Key is its idempotency key.
	Key string
	// Existing is true when a pending job with the key was found.
	Existing bool
}

// Enqueue runs the registered activity fn with input in as a standalone job,
// with no workflow around it: at least once, retried by its policy, and kept
// as a dead letter if it fails for good.
func Enqueue[In, Out any](ctx context.Context, e *Engine, fn func(context.Context, In) (Out, error), in In, o JobOptions) (Job, error) {
	return enqueue(ctx, e, e.store, false, fn, in, o)
}

func enqueue(ctx context.Context, e *Engine, s store.Store, inTx bool, fn any, in any, o JobOptions) (Job, error) {
	name, opts := e.resolveActivity(fn)
	opts = opts.Merge(o.Activity)
	if err := opts.Validate(); err != nil {
		return Job{}, fmt.Errorf("enqueue job %s: %w", name, err)
	}
	input, err := encodePayload(in, e.opts.MaxPayloadBytes, "input of job "+name)
	if err != nil {
		return Job{}, fmt.Errorf("enqueue job %s: %w", name, err)
	}
	encoded, err := json.Marshal(opts.WithDefaults())
	if err != nil {
		return Job{}, fmt.Errorf("enqueue job %s: encode options: %w", name, err)
	}
	if o.Key == "" {
		o.Key = uuid.NewString()
	}
	if err := checkName("job key", o.Key, maxIDLen); err != nil {
		return Job{}, fmt.Errorf("enqueue job %s: %w", name, err)
	}
	now := e.now()
	runAt := now
	switch {
	case !o.RunAt.IsZero():
		runAt = o.RunAt
	case o.RunAfter > 0:
		runAt = now.Add(o.RunAfter)
	}
	t, err := e.newActivityTask("", history.ActivityScheduled{Activity: name, Input: input, Options: encoded}, runAt)
	if err != nil {
		return Job{}, fmt.Errorf("enqueue job: %w", err)
	}
	t.IdempotencyKey = o.Key
	notifies := inTx || !e.hub.Active() // the statement notifies, else Publish does
	id, existing, err := s.EnqueueJob(ctx, store.EnqueueJobParams{Task: t, Now: now, Notify: notifies})
	if err != nil {
		return Job{}, err
	}
	if !existing && !notifies && !runAt.After(now) {
		e.hub.Publish(notify.ActivityTasks(t.Queue))
	}
	return Job{ID: id, Key: o.Key, Existing: existing}, nil
}
