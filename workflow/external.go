package workflow

import (
	"encoding/json"
	"fmt"

	"github.com/durable-go/durable/history"
)

// ExternalWorkflowError is the error of a signal or cancel request that
// could not reach its workflow: no run of WorkflowID is open (or the open
// one is not RunID, when RunID was given).
type ExternalWorkflowError struct {
	WorkflowID string
	RunID      string
	Message    string
}

func (e *ExternalWorkflowError) Error() string {
	target := e.WorkflowID
	if e.RunID != "" {
		target += " (run " + e.RunID + ")"
	}
	return fmt.Sprintf("workflow %s: %s", target, e.Message)
}

// SignalExternalWorkflow sends arg under name to the open run of another
// workflow (runID, if not empty, must be that run). The signal is a command:
// recorded in this run's history and sent in the same transaction, exactly
// once, however often the code is replayed. The future is ready once the
// signal is in the target's history, and fails with an
// *ExternalWorkflowError if the target has no open run.
//
//	_, err := workflow.SignalExternalWorkflow(ctx, "mutex:"+resource, "", "release", me).Get(ctx)
func SignalExternalWorkflow(ctx Context, workflowID, runID, name string, arg any) Future[struct{}] {
	payload, err := json.Marshal(arg)
	if err != nil {
		return failedFuture[struct{}]("signal "+name, fmt.Errorf("signal %q to workflow %s: encode: %w", name, workflowID, err))
	}
	return external(ctx, workflowID, runID, "signal "+name, func(seq int64) history.Attributes {
		return history.ExternalSignalScheduled{Seq: seq, WorkflowID: workflowID, RunID: runID, Name: name, Payload: payload}
	})
}

// RequestCancelExternalWorkflow asks the open run of another workflow
// (runID, if not empty, must be that run) to cancel, as Engine.Cancel does,
// exactly once, as SignalExternalWorkflow sends a signal.
func RequestCancelExternalWorkflow(ctx Context, workflowID, runID, reason string) Future[struct{}] {
	return external(ctx, workflowID, runID, "cancel request", func(seq int64) history.Attributes {
		return history.ExternalCancelScheduled{Seq: seq, WorkflowID: workflowID, RunID: runID, Reason: reason}
	})
}

// SignalChildWorkflow sends arg under name to the child workflow whose
// future is child (from ExecuteChildWorkflow), as SignalExternalWorkflow.
func SignalChildWorkflow[Out any](ctx Context, child ChildWorkflowFuture[Out], name string, arg any) Future[struct{}] {
	f, ok := child.(childFuture[Out])
	if !ok || f.f.child == "" {
		return failedFuture[struct{}]("signal "+name, fmt.Errorf("signal %q: the future is not a child workflow's", name))
	}
	return SignalExternalWorkflow(ctx, f.f.child, "", name, arg)
}

// external records an external request's command and returns its future,
// which its outcome event settles. A request, once made, is not canceled
// with the run.
func external(ctx Context, workflowID, runID, what string, command func(seq int64) history.Attributes) Future[struct{}] {
	x := ctx.exec()
	if workflowID == "" {
		return failedFuture[struct{}](what, fmt.Errorf("%s: a workflow ID is required", what))
	}
	seq := x.nextSeq()
	f := &future{name: what + " to workflow " + workflowID, external: workflowID, externalRun: runID, seq: seq, detached: true}
	x.futures[seq] = f
	x.command(command(seq))
	return typedFuture[struct{}]{f}
}
