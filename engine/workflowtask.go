package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/workflow"
)

// errUnregistered marks a task whose type this worker does not have.
var errUnregistered = errors.New("not registered")

// claimWorkflowTasks claims ready tasks of the workflow types this engine
// has: a type no worker has waits, ready, and shows in the queue's
// oldest-ready age.
func (e *Engine) claimWorkflowTasks(ctx context.Context, queue string, n int) ([]store.WorkflowTask, error) {
	types := e.registered(true)
	if len(types) == 0 {
		return nil, nil
	}
	tasks, err := e.store.ClaimWorkflowTasks(ctx, store.ClaimParams{
		Queue: queue, WorkerID: e.opts.WorkerID, Limit: n, Now: e.dueNow(), Lease: e.opts.WorkflowTaskLease, Types: types,
	})
	if err == nil {
		e.prefetchHistories(ctx, tasks)
	}
	return tasks, err
}

// prefetchMaxEvents bounds the histories prefetchHistories reads: by the
// events their tasks' runs had consumed, so that a claim of long histories
// does not hold them all in memory at once.
const prefetchMaxEvents = 200

// prefetchHistories reads, in one statement, the histories of claimed tasks
// whose runs are not cached here and are short (the first task of a run
// started elsewhere, or a run that moved to this engine), so that each task
// does not read its own: one statement and round trip per claim instead of
// one per task. Like each task's own read, it reads after the claim
// committed; its events are what processWorkflowTask would have read. On
// an error each task reads its own.
func (e *Engine) prefetchHistories(ctx context.Context, tasks []store.WorkflowTask) {
	var runs []string
	for _, t := range tasks {
		if len(t.Events) == 0 && t.ProcessedEventID <= prefetchMaxEvents && !e.cache.Has(t.RunID) {
			runs = append(runs, t.RunID)
		}
	}
	if len(runs) < 2 {
		return
	}
	byRun, err := e.store.ListEventsOfRuns(ctx, runs)
	if err != nil {
		return
	}
	for i := range tasks {
		if events := byRun[tasks[i].RunID]; len(events) > 0 { // only runs without events were asked for
			tasks[i].Events = events
		}
	}
}

// processWorkflowTask runs one workflow task: it brings the run's executor up
// to date with history (from the cache, or by replay), takes the commands the
// code produced and commits them, with all their effects, in one transaction.
func (e *Engine) processWorkflowTask(ctx context.Context, t store.WorkflowTask) {
	attrs := []slog.Attr{slog.String("run_id", t.RunID), slog.String("workflow", t.WorkflowType)}
	began := time.Now()
	ctx, span := e.taskSpan(ctx, t)
	var spanErr error
	defer func() {
		endSpan(span, spanErr)
		e.metrics.taskLatency.Observe(time.Since(began).Seconds())
	}()
	e.mu.RLock()
	def := e.workflows[t.WorkflowType]
	e.mu.RUnlock()
	if def == nil {
		e.failWorkflowTask(ctx, t, attrs, fmt.Errorf("workflow type %q is %w on worker %s: register it, or run it on a queue whose workers have it", t.WorkflowType, errUnregistered, e.opts.WorkerID))
		return
	}
	for rerun := 0; ; rerun++ {
		err := e.runWorkflowTask(ctx, t, def, attrs, span)
		if !errors.Is(err, store.ErrRunMoved) {
			spanErr = err
			return
		}
		// Events reached the run while the task ran: the task runs again,
		// from history, with them, on the same claim.
		if rerun == maxTaskReruns {
			e.log.LogAttrs(ctx, slog.LevelWarn, "events keep reaching the run while its workflow task runs; the task runs again when its lease ends",
				append(attrs, slog.Int("reruns", rerun))...)
			return
		}
		t.Events = nil
	}
}

// maxTaskReruns bounds how often one claim of a workflow task runs again
// because events reached its run while it ran.
const maxTaskReruns = 8

// runWorkflowTask is processWorkflowTask's one try at task t: it brings the
// run's executor up to date with history and commits the commands the code
// produced. It returns store.ErrRunMoved, having committed nothing and
// closed the executor, if events reached the run meanwhile; other errors
// are reported here and returned for the task's span.
func (e *Engine) runWorkflowTask(ctx context.Context, t store.WorkflowTask, def *workflowDef, attrs []slog.Attr, span trace.Span) error {
	x, _ := e.cache.Take(t.RunID)
	cached := x != nil
	span.SetAttributes(attribute.Bool("durable.cache_hit", cached))
	if cached {
		e.metrics.cache.WithLabelValues("hit").Inc()
	} else {
		e.metrics.cache.WithLabelValues("miss").Inc()
		x = e.newExecutor(t, def)
	}
	// A hand-off carries the events it appended, a claim the whole history
	// of a run's first task: if they go on from where the run's executor
	// is, there is nothing else to read.
	events, err := t.Events, error(nil)
	if next := x.LastEventID() + 1; len(events) > 0 && events[0].ID <= next && next <= events[len(events)-1].ID {
		events = events[next-events[0].ID:]
	} else {
		events, err = e.readEvents(ctx, t.RunID, x.LastEventID())
	}
	before := x.LastEventID() // the history this worker had seen
	if !cached {
		before = t.ProcessedEventID
	}
	if err == nil {
		applyStart := time.Now()
		err = x.Apply(events, t.ProcessedEventID)
		if !cached {
			e.metrics.replayTime.Observe(time.Since(applyStart).Seconds())
		}
	}
	if err != nil {
		x.Close()
		if e.store.Transient(err) {
			// Not the run's fault: the task returns when its lease ends,
			// without counting as a failure.
			e.log.LogAttrs(ctx, slog.LevelWarn, "read history failed; the task returns when its lease ends",
				append(attrs, slog.String("error", err.Error()))...)
			return err
		}
		e.failWorkflowTask(ctx, t, attrs, err)
		return err
	}

	_, err = e.commitStep(ctx, step{t: t, x: x, cmds: x.TakeCommands(), attrs: attrs, span: span, before: before})
	return err
}

// failWorkflowTask gives the task back to be retried with backoff, keeping
// the error on the run for Describe. The run itself does not fail: a panic
// or non-determinism is fixed by deploying new code.
func (e *Engine) failWorkflowTask(ctx context.Context, t store.WorkflowTask, attrs []slog.Attr, cause error) {
	delay := min(time.Second<<min(t.Attempts, 6), time.Minute)
	level := slog.LevelError
	var (
		pe *workflow.PanicError
		nd *workflow.NonDeterminismError
	)
	reason := "other"
	switch {
	case errors.As(cause, &pe):
		attrs = append(attrs, slog.String("stack", pe.Stack))
		reason = "panic"
	case errors.As(cause, &nd):
		e.metrics.nondeterminism.Inc()
		reason = "nondeterminism"
	case errors.Is(cause, errUnregistered):
		reason = "unregistered"
	case errors.As(cause, new(*workflow.DeadlockError)):
		attrs = append(attrs, deadlockStack(cause))
		reason = "deadlock"
	}
	e.metrics.taskFailures.WithLabelValues(reason).Inc()
	e.log.LogAttrs(ctx, level, "workflow task failed; the run waits and the task is retried",
		append(attrs, slog.String("error", cause.Error()), slog.Int("attempt", t.Attempts+1), slog.Duration("retry_in", delay))...)
	msg := cause.Error()
	if pe != nil {
		msg += "\n" + pe.Stack
	}
	now := e.now()
	err := e.store.FailWorkflowTask(ctx, store.FailWorkflowTaskParams{RunID: t.RunID, Token: t.Token, Error: msg, RunAfter: now.Add(delay), Now: now})
	if errors.Is(err, store.ErrLeaseLost) {
		e.metrics.staleWrites.WithLabelValues("workflow_fail").Inc()
		e.log.LogAttrs(ctx, slog.LevelWarn, "workflow task lease lost; its failure was refused", attrs...)
	} else if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "record workflow task failure; the task returns when its lease ends",
			append(attrs, slog.String("error", err.Error()))...)
	}
}

// readEvents reads a run's events after afterID, retrying for a while if
// the database does not answer (a killed connection, a restart).
func (e *Engine) readEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	wait := 20 * time.Millisecond
	deadline := time.Now().Add(e.opts.WorkflowTaskLease / 2)
	for {
		events, err := e.store.ListEvents(ctx, runID, afterID)
		if !e.store.Transient(err) || time.Now().Add(wait).After(deadline) || !sleepCtx(ctx, wait) {
			return events, err
		}
		wait = min(2*wait, time.Second)
	}
}
