package workflow

import (
	"encoding/json"
	"fmt"

	"github.com/durable-go/durable/history"
)

// ParentClosePolicy says what happens to a child workflow still running
// when its parent closes.
type ParentClosePolicy string

// Parent-close policies.
const (
	// ParentCloseTerminate terminates the child (the default).
	ParentCloseTerminate ParentClosePolicy = "terminate"
	// ParentCloseCancel asks the child to cancel.
	ParentCloseCancel ParentClosePolicy = "cancel"
	// ParentCloseAbandon leaves the child running on its own.
	ParentCloseAbandon ParentClosePolicy = "abandon"
)

// ChildOptions configure a child workflow.
type ChildOptions struct {
	// ID is the child's workflow ID. Default: the parent's run ID, "/" and
	// the command's sequence number. An ID with an open run fails the
	// child's future.
	ID string
	// Queue is where the child's workflow tasks go. Default: the child
	// workflow's registered queue.
	Queue string
	// ParentClosePolicy defaults to ParentCloseTerminate.
	ParentClosePolicy ParentClosePolicy
}

// ChildWorkflowError is what a parent receives when a child fails, is
// canceled or terminated, or could not start.
type ChildWorkflowError struct {
	WorkflowID string
	Message    string
	Class      string
}

func (e *ChildWorkflowError) Error() string {
	return fmt.Sprintf("child workflow %s failed (%s): %s", e.WorkflowID, e.Class, e.Message)
}

// ChildWorkflowExecution names the run of a started child workflow.
type ChildWorkflowExecution struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
}

// ChildWorkflowFuture is the future of a child workflow's result.
type ChildWorkflowFuture[Out any] interface {
	Future[Out]
	// GetChildWorkflowExecution returns a future that is ready once the
	// child has started, with its workflow and run IDs: from then on the
	// parent may signal it (SignalChildWorkflow) or, with
	// ParentCloseAbandon, return and leave it running. It fails as the
	// child's future does if the child could not start.
	GetChildWorkflowExecution() Future[ChildWorkflowExecution]
}

type childFuture[Out any] struct {
	typedFuture[Out]
}

func (f childFuture[Out]) GetChildWorkflowExecution() Future[ChildWorkflowExecution] {
	return typedFuture[ChildWorkflowExecution]{f.f.started}
}

// failedChild returns a child future that failed before the child started.
func failedChild[Out any](name string, err error) ChildWorkflowFuture[Out] {
	f := failedFuture[Out](name, err).(typedFuture[Out])
	f.f.started = f.f
	return childFuture[Out]{f}
}

// ExecuteChildWorkflow starts wf as a child workflow with input in and
// returns a future for its result. The child is a run of its own (its own
// workflow ID, history and queue), created in the same transaction as the
// parent's command; when it closes, its result is appended to the parent's
// history.
func ExecuteChildWorkflow[In, Out any](ctx Context, wf func(Context, In) (Out, error), in In, o ChildOptions) ChildWorkflowFuture[Out] {
	x := ctx.exec()
	if x.opts.ResolveWorkflow == nil {
		return failedChild[Out]("child workflow", fmt.Errorf("child workflows are not available here"))
	}
	name, queue := x.opts.ResolveWorkflow(wf)
	if IsCanceled(ctx) {
		return failedChild[Out]("child workflow "+name, ErrCanceled)
	}
	input, err := json.Marshal(in)
	if err != nil {
		return failedChild[Out]("child workflow "+name, fmt.Errorf("encode input of child workflow %s: %w", name, err))
	}
	switch o.ParentClosePolicy {
	case "":
		o.ParentClosePolicy = ParentCloseTerminate
	case ParentCloseTerminate, ParentCloseCancel, ParentCloseAbandon:
	default:
		return failedChild[Out]("child workflow "+name, fmt.Errorf("child workflow %s: unknown parent-close policy %q", name, o.ParentClosePolicy))
	}
	if o.Queue != "" {
		queue = o.Queue
	}
	seq := x.nextSeq()
	if o.ID == "" {
		o.ID = fmt.Sprintf("%s/%d", x.opts.RunID, seq)
	}
	// A child is not canceled with its parent's context: its parent-close
	// policy decides.
	f := &future{name: "child workflow " + o.ID, child: o.ID, seq: seq, detached: true,
		started: &future{name: "start of child workflow " + o.ID}}
	x.futures[seq] = f
	x.command(history.ChildWorkflowScheduled{
		Seq: seq, WorkflowType: name, WorkflowID: o.ID, Queue: queue, Input: input,
		ParentClosePolicy: string(o.ParentClosePolicy),
	})
	x.children = true
	return childFuture[Out]{typedFuture[Out]{f}}
}
