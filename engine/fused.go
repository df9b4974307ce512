package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// fusedOutcome is the activity outcome a fused step records.
type fusedOutcome struct {
	task  store.ActivityTask
	event history.Event // the outcome, numbered as the run's next event
	attrs []slog.Attr   // the activity's log attributes
}

// fuse records an activity's outcome together with the next workflow task
// of its run, in one transaction, when this engine has the run in memory:
// the cached run applies the outcome, runs, and its commands are committed
// with the outcome (store.CommitWorkflowTaskParams.Outcome). A step of a
// cached run thus costs one transaction instead of two (outcome, then
// workflow task), and no workflow task row is written.
//
// The workflow task runs in the activity's slot: it is the same goroutine,
// one step later. fuse reports whether it took care of the outcome. It
// returns the run's workflow task if it claimed one for the caller to run
// (then), and the activity the step scheduled and claimed for the slot
// (next). If it did not (the run is not cached, or moved on
// meanwhile), the caller records the outcome on its own, and the run's next
// task reads its history as usual.
func (e *Engine) fuse(ctx context.Context, at store.ActivityTask, attrs []slog.Attr, ev history.Attributes) (handled bool, then *store.WorkflowTask, next *store.ActivityTask) {
	x, t := e.cache.take(at.RunID)
	if x == nil {
		return false, nil, nil
	}
	e.metrics.cache.WithLabelValues("hit").Inc()
	began := time.Now()
	wattrs := []slog.Attr{slog.String("run_id", t.RunID), slog.String("workflow", t.WorkflowType)}
	ctx, span := e.startSpan(ctx, t.TraceContext, "durable.workflow_task",
		attribute.String("durable.workflow.type", t.WorkflowType), attribute.String("durable.workflow.id", t.WorkflowID),
		attribute.String("durable.run.id", t.RunID), attribute.Bool("durable.cache_hit", true), attribute.Bool("durable.fused", true))
	var spanErr error
	defer func() {
		endSpan(span, spanErr)
		e.metrics.taskLatency.Observe(time.Since(began).Seconds())
	}()

	before := x.LastEventID()
	f := &fusedOutcome{task: at, attrs: attrs, event: history.Event{ID: before + 1, Time: e.now(), Attributes: ev}}
	x.HoldLogs() // until the step takes effect
	if err := x.Apply([]history.Event{f.event}, before); err != nil {
		// The plain path runs the task again from history and reports it.
		x.Close()
		spanErr = err
		return false, nil, nil
	}
	cmds := x.TakeCommands()
	t.Token, t.ProcessedEventID, t.Events = 0, f.event.ID, nil
	next, err := e.commitTask(ctx, t, x, cmds, wattrs, span, before, f)
	switch {
	case err == nil:
		// Tests see the step as a task once it took effect: a fused step
		// runs on no claim, so one on a stale copy of the run may overlap
		// with the run's task on another engine, and is then refused.
		if h := testHookWorkflowTask.Load(); h != nil {
			(*h)(at.RunID, true)
			(*h)(at.RunID, false)
		}
		return true, nil, next
	case errors.Is(err, store.ErrRunMoved):
		return false, nil, nil
	case errors.Is(err, errNotFusable):
		// Two transactions: the outcome, claiming the run's new workflow
		// task for this worker, then the commands, if nothing else reached
		// the run in between (otherwise the task runs from history).
		ready, err := e.store.ResolveActivity(ctx, store.ResolveActivityParams{
			RunID: at.RunID, TaskID: at.ID, Attempt: at.Attempt, Event: ev, Now: f.event.Time,
			ClaimAs: e.opts.WorkerID, Lease: e.opts.WorkflowTaskLease,
		})
		switch {
		case err != nil:
			x.Close()
			e.logLostWrite(ctx, "record activity outcome", attrs, err)
			return true, nil, nil
		case len(ready.WorkflowTasks) != 1:
			x.Close()
		case len(ready.WorkflowTasks[0].Events) != 1 || ready.WorkflowTasks[0].Events[0].ID != f.event.ID:
			x.Close()
			t := ready.WorkflowTasks[0]
			then = &t
		default:
			// The outcome is recorded and the task is ours.
			x.ReleaseLogs(true)
			e.commitTask(ctx, ready.WorkflowTasks[0], x, cmds, wattrs, span, before, nil) // not fused: no next activity
		}
		e.announce(ready)
		return true, then, nil
	}
	return false, nil, nil // commitTask returns no other error
}
