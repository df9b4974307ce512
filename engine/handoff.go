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
	"github.com/durable-go/durable/internal/workers"
	"github.com/durable-go/durable/workflow"
)

// The pieces every way of running a workflow task shares: a task claimed
// from the queue, a fused step and an eager start.

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

// activityHandOff is the activities a commit claims for this engine: those
// on queues it serves with a free slot, which then run without a claim
// transaction, and, in a fused step, the first on the finished activity's
// queue, which that activity's slot runs next. The others on queues it
// serves go to its backlog once the commit has taken effect. An activity
// already running ahead of the commit (runahead.go) is claimed for the
// slot it runs in.
type activityHandOff struct {
	reserved map[int64]*workers.Pool[store.ActivityTask]
	inline   int64 // seq of the activity for the calling slot, or 0
	ahead    *runAhead
	runID    string
	queued   []store.NewActivityTask // on served queues, without a slot
	backlog  *activityBacklog
}

// handOffActivities marks the activities of run runID to claim (ClaimAs)
// and reserves their slots. The pools are held from here on: Run may drop
// its pool list meanwhile. inlineQueue, if set, is the queue of the calling
// slot; ahead, if set, is running one of the activities already.
func (e *Engine) handOffActivities(runID string, acts []store.NewActivityTask, inlineQueue string, ahead *runAhead) activityHandOff {
	h := activityHandOff{reserved: map[int64]*workers.Pool[store.ActivityTask]{}, runID: runID, backlog: e.backlog, ahead: ahead}
	for i := range acts {
		a := &acts[i]
		p := e.activityPool(a.Queue)
		switch {
		case ahead != nil && a.Seq == ahead.task.Seq:
			a.ClaimAs = e.opts.WorkerID
		case p == nil, !e.hasActivity(a.Activity): // for the engines that have it
		case inlineQueue != "" && h.inline == 0 && a.Queue == inlineQueue:
			a.ClaimAs, h.inline = e.opts.WorkerID, a.Seq
		case p.TryAcquire():
			a.ClaimAs = e.opts.WorkerID
			h.reserved[a.Seq] = p
		default:
			a.RunAfter = a.RunAfter.Add(backlogHold) // for others; this engine claims it by name
			h.queued = append(h.queued, *a)
		}
	}
	return h
}

// start runs the tasks the commit claimed in their reserved slots, gives
// back the slots it claimed nothing for, puts the queued activities of a
// commit that took effect in the backlog, tells the activity running ahead
// of the commit which task is its own (none if the commit failed), and
// returns the calling slot's task.
func (h activityHandOff) start(claimed []store.ActivityTask, committed bool) (inline *store.ActivityTask) {
	if committed {
		h.backlog.push(h.runID, h.queued)
	}
	var ahead *store.ActivityTask
	defer func() {
		if h.ahead != nil {
			h.ahead.settle(ahead, false)
		}
	}()
	for _, a := range claimed {
		if h.ahead != nil && a.Seq == h.ahead.task.Seq {
			ahead = &a
			continue
		}
		if a.Seq == h.inline {
			inline = &a
			continue
		}
		if p := h.reserved[a.Seq]; p != nil {
			p.Start(a)
			delete(h.reserved, a.Seq)
		}
	}
	for _, p := range h.reserved {
		p.Release()
	}
	return inline
}
