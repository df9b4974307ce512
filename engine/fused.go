package engine

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
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
// events and activities (timers, a close...), or the code fails: the start
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
	x := wfexec.New(wfexec.Options{
		RunID: t.RunID, WorkflowID: t.WorkflowID, WorkflowType: t.WorkflowType,
		Func: def.run, ResolveActivity: e.resolveActivity, ResolveWorkflow: e.resolveWorkflow, Logger: e.log,
	})
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
	if err != nil || !commit.IsStep() {
		return giveUp()
	}
	reserved := map[int64]*workerPool[store.ActivityTask]{}
	for i := range commit.Activities {
		a := &commit.Activities[i]
		if p := e.activityPool(a.Queue); p != nil && p.tryAcquire() {
			a.ClaimAs = e.opts.WorkerID
			reserved[a.Seq] = p
		}
	}
	params.First = &commit
	e.metrics.cache.WithLabelValues("miss").Inc()
	// The task's span starts when it did, now that it is known to count.
	_, span := e.tracer.Start(runContext(ctx, t.TraceContext), "durable.workflow_task", trace.WithTimestamp(began),
		trace.WithAttributes(attribute.String("durable.workflow.type", t.WorkflowType), attribute.String("durable.workflow.id", t.WorkflowID),
			attribute.String("durable.run.id", t.RunID), attribute.Bool("durable.cache_hit", false), attribute.Bool("durable.eager", true)))
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
		defer func() {
			for _, a := range r.Ready.ActivityTasks {
				if p := reserved[a.Seq]; p != nil && err == nil {
					p.start(a)
					delete(reserved, a.Seq)
				}
			}
			for _, p := range reserved {
				p.release()
			}
		}()
		if err != nil { // the ID is taken, or the insert failed: nothing of ours was recorded
			x.Close()
			return
		}
		hookInstantTask(t.RunID)
		x.ReleaseLogs(true)
		e.announce(r.Ready)
		own := make([]history.Event, len(commit.Events))
		for i, a := range commit.Events {
			own[i] = history.Event{ID: 2 + int64(i), Time: params.Now, Attributes: a}
		}
		if err := x.Apply(own, math.MaxInt64); err != nil {
			x.Close() // cannot happen: they are its own commands
			return
		}
		if x.OnlyTimers() { // it waits for a signal: nothing to keep it for
			x.Close()
			return
		}
		t.Events = nil
		e.cache.put(t, x)
	}
}

// hookInstantTask shows tests a workflow task that ran on no claim (a fused
// step, an eager start) as a task, at the moment it took effect: before
// anything it made ready can start. (Seen from its start, a fused step on a
// stale copy of a run may overlap with the run's task elsewhere; it is then
// refused and is no task.)
func hookInstantTask(runID string) {
	if h := testHookWorkflowTask.Load(); h != nil {
		(*h)(runID, true)
		(*h)(runID, false)
	}
}
