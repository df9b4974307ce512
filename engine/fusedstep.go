package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
)

// fusedOutcome is what a fused step records before the run's commands: an
// activity's outcome, or the firing of the run's timer timerSeq.
type fusedOutcome struct {
	task     store.ActivityTask // the activity, or zero for a timer
	timerSeq int64
	event    history.Event // the outcome, numbered as the run's next event
	attrs    []slog.Attr   // the activity's (or timer's) log attributes
}

// fuse records an activity's outcome together with the next workflow task
// of its run, in one transaction, when this engine has the run in memory:
// the cached run applies the outcome, runs, and its commands are committed
// with the outcome (store.CommitWorkflowTaskParams.Outcome). A step of a
// cached run thus costs one transaction instead of two (outcome, then
// workflow task), and no workflow task row is written.
//
// The workflow task runs in the activity's goroutine, one step later, in
// the slot resolve gives it. fuse reports whether it took care of the
// outcome. It returns the run's workflow task if it claimed one for the
// caller to run (then), and the activity the step claimed for the
// activity's slot (next): the next one the step scheduled, or, if it
// scheduled none, the queue's next task
// (store.CommitWorkflowTaskParams.ClaimNext). If it did not take care of
// the outcome (the run is not cached, or moved on meanwhile), the caller
// records the outcome on its own, and the run's next task reads its
// history as usual; a next task claimed meanwhile is the slot's all the
// same.
func (e *Engine) fuse(ctx context.Context, at store.ActivityTask, attrs []slog.Attr, ev history.Attributes) (handled bool, then *store.WorkflowTask, next *store.ActivityTask) {
	x, t := e.cache.Take(at.RunID)
	if x == nil {
		return false, nil, nil
	}
	f := &fusedOutcome{task: at, attrs: attrs, event: history.Event{Attributes: ev}}
	return e.stepFused(ctx, x, t, f, func(s step) (*store.WorkflowTask, bool) {
		return e.resolveThenCommit(ctx, s), true
	})
}

// stepFused is a fused step's apply and commit stages: it runs the cached
// run x (whose last task is t) past the outcome f.event, numbered and timed
// here, and commits its commands with it (see fuse and wakeCached).
// Commands the fused statements do not cover go to notFusable, with s.x
// open and its logs held, which reports whether it took care of the
// outcome. If the step does not take effect, x is closed.
func (e *Engine) stepFused(ctx context.Context, x wfexec.Executor, t store.WorkflowTask, f *fusedOutcome,
	notFusable func(s step) (then *store.WorkflowTask, handled bool),
) (handled bool, then *store.WorkflowTask, next *store.ActivityTask) {
	e.metrics.cache.WithLabelValues("hit").Inc()
	began := time.Now()
	wattrs := []slog.Attr{slog.String("run_id", t.RunID), slog.String("workflow", t.WorkflowType)}
	ctx, span := e.taskSpan(ctx, t, trace.WithAttributes(attribute.Bool("durable.cache_hit", true), attribute.Bool("durable.fused", true)))
	var spanErr error
	defer func() {
		endSpan(span, spanErr)
		e.metrics.taskLatency.Observe(time.Since(began).Seconds())
	}()

	before := x.LastEventID()
	// Stamped as the store will: never before the run's last event.
	f.event.ID, f.event.Time = before+1, later(e.now(), x.LastEventTime())
	x.HoldLogs() // until the step takes effect
	if err := x.Apply([]history.Event{f.event}, before); err != nil {
		// The plain path runs the task again from history and reports it.
		x.Close()
		spanErr = err
		return false, nil, nil
	}
	cmds := x.TakeCommands()
	t.Token, t.ProcessedEventID, t.Events = 0, f.event.ID, nil
	s := step{t: t, x: x, cmds: cmds, attrs: wattrs, span: span, before: before, fused: f}
	next, err := e.commitStep(ctx, s)
	switch {
	case err == nil:
		return true, nil, next
	case errors.Is(err, store.ErrRunMoved):
		return false, nil, next // a task claimed for the slot is its all the same
	case errors.Is(err, errNotFusable):
		then, handled := notFusable(s)
		return handled, then, nil
	}
	return false, nil, next // commitStep returns no other error
}

// resolveThenCommit is fused step s in two transactions, for commands the
// fused statements do not cover: the outcome, claiming the run's new
// workflow task for this worker, then the commands s.x produced, if nothing
// else reached the run in between. Otherwise it returns the claimed task,
// to be run from history by the caller.
func (e *Engine) resolveThenCommit(ctx context.Context, s step) (then *store.WorkflowTask) {
	f, x := s.fused, s.x
	at := f.task
	ready, err := e.store.ResolveActivity(ctx, store.ResolveActivityParams{
		RunID: at.RunID, TaskID: at.ID, Attempt: at.Attempt, Event: f.event.Attributes, Now: f.event.Time,
		ClaimAs: e.opts.WorkerID, Lease: e.opts.WorkflowTaskLease,
	})
	if err != nil {
		x.Close()
		e.logLostWrite(ctx, "record activity outcome", f.attrs, err)
		return nil
	}
	defer e.announce(ready)
	if len(ready.WorkflowTasks) != 1 { // the run's task exists already: it is someone else's
		x.Close()
		return nil
	}
	wt := ready.WorkflowTasks[0]
	if len(wt.Events) != 1 || wt.Events[0].ID != f.event.ID {
		x.Close()
		return &wt
	}
	x.ReleaseLogs(true) // the outcome is recorded and the task is ours
	s.t, s.fused = wt, nil
	if _, err := e.commitStep(ctx, s); errors.Is(err, store.ErrRunMoved) {
		wt.Events = nil // events reached the run meanwhile: the task runs again from history
		return &wt
	}
	return nil
}
