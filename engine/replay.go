package engine

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/workflow"
)

// Replay runs the workflow code registered on this engine against a
// recorded history (from a file, or History of a run), without touching the
// database. It returns nil when the code reproduces the history, or the first
// divergence as a *workflow.NonDeterminismError naming the event, what
// history recorded, what the code did and where. Use it in tests, with
// histories recorded from production, before deploying changed workflow
// code.
func (e *Engine) Replay(ctx context.Context, h history.History) error {
	x, err := e.replayed(ctx, h)
	if err != nil {
		return err
	}
	defer x.Close()
	last := h.Events[len(h.Events)-1]
	switch last.Attributes.(type) {
	case history.WorkflowCompleted, history.WorkflowFailed, history.WorkflowCanceled, history.WorkflowContinuedAsNew:
		if cmds := x.TakeCommands(); len(cmds) > 0 {
			return &workflow.NonDeterminismError{
				RunID: h.RunID, EventID: last.ID + 1,
				Recorded: "the end of the history (the run closed)", Got: cmds[0].EventType(),
			}
		}
	}
	return ctx.Err()
}

// replayed returns an executor that has replayed h, silently.
func (e *Engine) replayed(ctx context.Context, h history.History) (wfexec.Executor, error) {
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	started := h.Events[0].Attributes.(history.WorkflowStarted)
	e.mu.RLock()
	def := e.workflows[started.WorkflowType]
	e.mu.RUnlock()
	if def == nil {
		return nil, fmt.Errorf("replay run %s: workflow type %q is not registered on this engine", h.RunID, started.WorkflowType)
	}
	x := wfexec.New(wfexec.Options{
		RunID: h.RunID, WorkflowID: started.WorkflowID, WorkflowType: started.WorkflowType,
		Func: def.run, ResolveActivity: e.resolveActivity, ResolveWorkflow: e.resolveWorkflow, Logger: e.log,
	})
	if err := x.Apply(h.Events, math.MaxInt64); err != nil {
		x.Close()
		return nil, err
	}
	return x, ctx.Err()
}

// ReplayRun replays the history of the newest run of workflowID from the
// database against this engine's code. See Replay.
func (e *Engine) ReplayRun(ctx context.Context, workflowID string) error {
	h, err := e.ExportHistory(ctx, workflowID)
	if err != nil {
		return err
	}
	return e.Replay(ctx, h)
}

// ExportHistory returns the newest run of workflowID as a History, ready
// for history.Export.
func (e *Engine) ExportHistory(ctx context.Context, workflowID string) (history.History, error) {
	r, err := e.store.GetRunByWorkflowID(ctx, workflowID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return history.History{}, fmt.Errorf("export history of %q: %w", workflowID, ErrRunNotFound)
		}
		return history.History{}, err
	}
	events, err := e.store.ListEvents(ctx, r.RunID, 0)
	if err != nil {
		return history.History{}, err
	}
	return history.History{Version: history.FormatVersion, WorkflowID: r.WorkflowID, RunID: r.RunID, WorkflowType: r.WorkflowType, Events: events}, nil
}

// Query asks the newest run of workflowID a question: the workflow's query
// handler named name (workflow.SetQueryHandler) answers from the state the
// run has reached. The run is rebuilt by replaying its history in this
// process: nothing is written, and no worker queue is involved, so a query
// answers while the run sleeps or waits for a busy queue.
func Query[T any](ctx context.Context, e *Engine, workflowID, name string) (T, error) {
	var out T
	h, err := e.ExportHistory(ctx, workflowID)
	if err != nil {
		return out, err
	}
	x, err := e.replayed(ctx, h)
	if err != nil {
		return out, fmt.Errorf("query %q of workflow %q: %w", name, workflowID, err)
	}
	defer x.Close()
	raw, err := x.Query(name)
	if err != nil {
		return out, fmt.Errorf("query workflow %q: %w", workflowID, err)
	}
	if err := decodePayload(raw, &out); err != nil {
		return out, fmt.Errorf("query %q of workflow %q: decode into %T: %w", name, workflowID, out, err)
	}
	return out, nil
}
