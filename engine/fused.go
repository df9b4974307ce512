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
	return e.stepFused(ctx, x, t, f, func(x wfexec.Executor, cmds []history.Attributes, wattrs []slog.Attr, span trace.Span, before int64) (*store.WorkflowTask, bool) {
		return e.resolveThenCommit(ctx, f, x, cmds, wattrs, span, before), true
	})
}

// stepFused runs the cached run x (whose last task is t) past the outcome
// f.event, numbered and timed here, and commits its commands with it (see
// fuse and wakeCached). Commands the fused statements do not cover go to
// notFusable, with x open and its logs held, which reports whether it took
// care of the outcome. If the step does not take effect, x is closed.
func (e *Engine) stepFused(ctx context.Context, x wfexec.Executor, t store.WorkflowTask, f *fusedOutcome,
	notFusable func(x wfexec.Executor, cmds []history.Attributes, wattrs []slog.Attr, span trace.Span, before int64) (*store.WorkflowTask, bool),
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
	next, err := e.commitTask(ctx, t, x, cmds, wattrs, span, before, f)
	switch {
	case err == nil:
		return true, nil, next
	case errors.Is(err, store.ErrRunMoved):
		return false, nil, next // a task claimed for the slot is its all the same
	case errors.Is(err, errNotFusable):
		then, handled := notFusable(x, cmds, wattrs, span, before)
		return handled, then, nil
	}
	return false, nil, next // commitTask returns no other error
}

// resolveThenCommit is a fused step in two transactions, for commands the
// fused statements do not cover: the outcome, claiming the run's new
// workflow task for this worker, then the commands x produced, if nothing
// else reached the run in between. Otherwise it returns the claimed task,
// to be run from history by the caller.
func (e *Engine) resolveThenCommit(ctx context.Context, f *fusedOutcome, x wfexec.Executor,
	cmds []history.Attributes, attrs []slog.Attr, span trace.Span, before int64) (then *store.WorkflowTask) {
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
	if _, err := e.commitTask(ctx, wt, x, cmds, attrs, span, before, nil); errors.Is(err, store.ErrRunMoved) {
		wt.Events = nil // events reached the run meanwhile: the task runs again from history
		return &wt
	}
	return nil
}

// eagerStart runs the first workflow task of a run that this engine is
// about to start, and runs, before the run is inserted: the run is then
// inserted with the task's commands (store.CreateRunParams.First), in one
// transaction, with no workflow task to claim or history to read. This is
// what makes a start cost one transaction. The task runs in the caller's
// goroutine: workflow code before its first command is deterministic and
// quick, or it is a bug.
//
// It returns nil, leaving params as they were, if the engine does not run
// the workflow's type on its queue, or the task's commands are more than
// events, activities and timers (a close, a child...), or the code fails: the start
// then goes the ordinary way. Otherwise it returns the function to call
// with CreateRun's outcome, which keeps the run in the cache and starts the
// activities claimed for this engine; until then Run keeps its pools.
func (e *Engine) eagerStart(ctx context.Context, params *store.CreateRunParams) (finish func(store.Run, error)) {
	e.handoffMu.RLock()
	e.mu.RLock()
	def := e.workflows[params.WorkflowType]
	e.mu.RUnlock()
	if def == nil || e.workflowPool(params.Queue) == nil {
		e.handoffMu.RUnlock()
		return nil
	}
	t := firstTask(*params, 0)
	began := time.Now()
	x := e.newExecutor(t, def)
	x.HoldLogs()                              // until the run is recorded: a start may find the ID taken
	giveUp := func() func(store.Run, error) { // the start goes the ordinary way
		x.Close()
		e.handoffMu.RUnlock()
		return nil
	}
	if err := x.Apply(t.Events, 0); err != nil {
		return giveUp()
	}
	commit, err := e.commitParams(t, 1, x.TakeCommands(), params.Now)
	if err != nil || !commit.IsFirst() {
		return giveUp()
	}
	handOff := e.handOffActivities(t.RunID, commit.Activities, "", nil)
	params.First = &commit
	e.metrics.cache.WithLabelValues("miss").Inc()
	// The task's span starts when it did, now that it is known to count.
	_, span := e.taskSpan(ctx, t, trace.WithTimestamp(began),
		trace.WithAttributes(attribute.Bool("durable.cache_hit", false), attribute.Bool("durable.eager", true)))
	return func(r store.Run, err error) {
		defer e.handoffMu.RUnlock()
		defer func() {
			if errors.Is(err, store.ErrConflict) { // the ID was taken: the task never counted
				span.SetAttributes(attribute.Bool("durable.discarded", true))
				err = nil
			}
			endSpan(span, err)
			e.metrics.taskLatency.Observe(time.Since(began).Seconds())
		}()
		defer handOff.start(r.Ready.ActivityTasks, err == nil) // none if CreateRun failed
		if err != nil {                                        // the ID is taken, or the insert failed: nothing of ours was recorded
			x.Close()
			return
		}
		x.ReleaseLogs(true)
		e.announce(r.Ready)
		if !applyOwn(x, 2, params.Now, commit.Events) {
			return
		}
		e.keepCached(t, x, commit)
	}
}
