package engine

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/internal/store"
)

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
