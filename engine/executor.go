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
	"github.com/durable-go/durable/workflow"
)

// The pieces every step shares (see step): a task claimed from the queue,
// a fused step and a run's first task.

// newExecutor creates the executor of task t's run, for workflow def.
func (e *Engine) newExecutor(t store.WorkflowTask, def *workflowDef) wfexec.Executor {
	return wfexec.New(wfexec.Options{
		RunID: t.RunID, WorkflowID: t.WorkflowID, WorkflowType: t.WorkflowType,
		Func: def.run, ResolveActivity: e.resolveActivity, ResolveWorkflow: e.resolveWorkflow, Logger: e.log,
		DeadlockTimeout: e.opts.WorkflowDeadlockTimeout,
	})
}

// deadlockStack is the log attribute of the stack where the workflow code
// of err, a *workflow.DeadlockError, was running when its task gave up.
func deadlockStack(err error) slog.Attr {
	var de *workflow.DeadlockError
	if !errors.As(err, &de) {
		return slog.String("stack", "")
	}
	return slog.String("stack", de.Stack)
}

// taskSpan starts the span of a workflow task of t's run, in the run's trace.
func (e *Engine) taskSpan(ctx context.Context, t store.WorkflowTask, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return e.tracer.Start(runContext(ctx, t.TraceContext), "durable.workflow_task", append(opts, trace.WithAttributes(
		attribute.String("durable.workflow.type", t.WorkflowType), attribute.String("durable.workflow.id", t.WorkflowID),
		attribute.String("durable.run.id", t.RunID)))...)
}

// applyOwn gives a cached run its own commands as history, numbered from
// firstID, so that its next task need not read them back. It closes x and
// reports false if they do not apply (it cannot happen: they are its own).
func applyOwn(x wfexec.Executor, firstID int64, at time.Time, cmds []history.Attributes) bool {
	events := make([]history.Event, len(cmds))
	for i, a := range cmds {
		events[i] = history.Event{ID: firstID + int64(i), Time: at, Attributes: a}
	}
	if err := x.Apply(events, math.MaxInt64); err != nil {
		x.Close()
		return false
	}
	return true
}
