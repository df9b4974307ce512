package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/store"
)

// unstartedBatch is how many activities past their schedule-to-start
// timeout one look fails; a full batch looks again at once.
const unstartedBatch = 100

// expireUnstarted fails, every PollInterval until ctx ends, the activities
// that no attempt started within their ScheduleToStartTimeout, whether or
// not any engine serves their queue. Every running engine does it; the
// store's fence (attempt 0) lets one of them, or a claim, win.
func (e *Engine) expireUnstarted(ctx context.Context) {
	t := time.NewTicker(e.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			tasks, err := e.store.UnstartedActivities(ctx, e.now(), unstartedBatch)
			if err != nil {
				if ctx.Err() == nil {
					e.log.LogAttrs(ctx, slog.LevelWarn, "look for activities past their schedule-to-start timeout; looking again in a poll interval",
						slog.String("error", err.Error()))
				}
				break
			}
			for _, task := range tasks {
				e.failUnstarted(ctx, task)
			}
			if len(tasks) < unstartedBatch {
				break
			}
		}
	}
}

// failUnstarted fails for good an activity that no attempt started within
// its schedule-to-start timeout, unless an attempt claims it first.
func (e *Engine) failUnstarted(ctx context.Context, t store.ActivityTask) {
	attrs := activityAttrs(t)
	opts, err := decodeActivityOptions(t.Options)
	if err != nil { // the store found the timeout in them
		e.log.LogAttrs(ctx, slog.LevelWarn, "decode options of an activity past its schedule-to-start timeout",
			append(attrs, slog.String("error", err.Error()))...)
		return
	}
	ev := e.failedForGood(ctx, t, attrs, scheduleToStartError(t, opts), "timeout", 0)
	ready, err := e.store.ResolveActivity(ctx, store.ResolveActivityParams{RunID: t.RunID, TaskID: t.ID, Attempt: 0, Event: ev, Now: e.now()})
	if errors.Is(err, store.ErrLeaseLost) {
		return // an attempt claimed it meanwhile, or another engine failed it
	}
	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "record an activity's schedule-to-start timeout; trying again in a poll interval",
			append(attrs, slog.String("error", err.Error()))...)
		return
	}
	e.announce(ready)
}

// startedTooLate returns the schedule-to-start timeout of an attempt
// claimed after it ended (the engines' look had not failed the activity
// yet), or nil.
func (e *Engine) startedTooLate(t store.ActivityTask, opts activity.Options) error {
	s2s := opts.ScheduleToStartTimeout
	if s2s <= 0 || t.Attempt != 1 || e.now().Before(t.ScheduledAt.Add(s2s)) {
		return nil
	}
	return scheduleToStartError(t, opts)
}

// scheduleToStartError is the failure of an activity that no attempt
// started in time.
func scheduleToStartError(t store.ActivityTask, opts activity.Options) error {
	return &timeoutError{kind: "schedule-to-start", d: opts.ScheduleToStartTimeout, err: fmt.Errorf(
		"no worker started activity %s within it: is a worker with it registered serving queue %q?", t.Activity, t.Queue)}
}
