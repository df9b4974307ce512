package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/codecstore"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/workflow"
)

// Replay runs the workflow code registered on this engine against a
// recorded history (from a file, or History of a run), without touching the
// database. It returns nil when the code reproduces the history, or the first
// divergence as a *workflow.NonDeterminismError naming the event, what
// history recorded, what the code did and where. A Replayer does the same
// with no database: use one in tests, with histories recorded from
// production, before deploying changed workflow code.
//
// A history may end open, closed by the code (completed, failed, canceled,
// continued as new: the code must then give no command past the end), or
// terminated: Terminate closes a run from outside, wherever its code was,
// so commands the code gives past that point were never recorded and are
// not compared.
func (e *Engine) Replay(ctx context.Context, h history.History) error {
	x, err := e.replayed(ctx, h)
	if err != nil {
		return err
	}
	defer x.Close()
	last := h.Events[len(h.Events)-1]
	switch last.Attributes.(type) {
	case history.WorkflowCompleted, history.WorkflowFailed, history.WorkflowCanceled, history.WorkflowContinuedAsNew:
		// Closed by the code's own command. (WorkflowTerminated is not here:
		// see above.)
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
	h, err := codecstore.DecodeHistory(e.opts.Codec, h)
	if err != nil {
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
		DeadlockTimeout: e.opts.WorkflowDeadlockTimeout,
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

// TraceStep is one step of a replay trace.
type TraceStep struct {
	// EventID is the history event the step belongs to.
	EventID int64
	Kind    TraceKind
	// Text describes the step for a person: the event and its attributes,
	// the command and the file:line of the call that made it, or the log
	// record.
	Text string
}

// TraceKind says what a TraceStep is.
type TraceKind string

// Trace step kinds.
const (
	// TraceEvent is an event delivered to the workflow code.
	TraceEvent TraceKind = "event"
	// TraceCommand is a recorded command matched with the code's call, and
	// where the code made it.
	TraceCommand TraceKind = "command"
	// TraceLog is a line the workflow logged at that point (a replay
	// otherwise drops the workflow's log lines).
	TraceLog TraceKind = "log"
)

// ReplayTrace replays h like Replay, calling fn for each step, and stops
// after event until (0: the whole history). It returns what the run waits
// for at that point: its open activities, timers, children and untaken
// signals. A divergence ends the trace with the replayer's error.
func (e *Engine) ReplayTrace(ctx context.Context, h history.History, until int64, fn func(TraceStep)) ([]string, error) {
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("replay trace: %w", err)
	}
	h, err := codecstore.DecodeHistory(e.opts.Codec, h)
	if err != nil {
		return nil, fmt.Errorf("replay trace: %w", err)
	}
	if until > 0 && until < int64(len(h.Events)) {
		h.Events = h.Events[:until]
	}
	started := h.Events[0].Attributes.(history.WorkflowStarted)
	e.mu.RLock()
	def := e.workflows[started.WorkflowType]
	e.mu.RUnlock()
	if def == nil {
		return nil, fmt.Errorf("replay trace of run %s: workflow type %q is not registered on this engine", h.RunID, started.WorkflowType)
	}
	x := wfexec.New(wfexec.Options{
		RunID: h.RunID, WorkflowID: started.WorkflowID, WorkflowType: started.WorkflowType,
		Func: def.run, ResolveActivity: e.resolveActivity, ResolveWorkflow: e.resolveWorkflow, Logger: e.log,
		DeadlockTimeout: e.opts.WorkflowDeadlockTimeout,
		Trace:           func(id int64, kind, text string) { fn(TraceStep{EventID: id, Kind: TraceKind(kind), Text: text}) },
	})
	defer x.Close()
	if err := x.Apply(h.Events, math.MaxInt64); err != nil {
		return x.Pending(), err
	}
	return x.Pending(), ctx.Err()
}

// CheckOptions select the open runs CheckOpenRuns replays.
type CheckOptions struct {
	// WorkflowType keeps runs of this type; empty keeps all.
	WorkflowType string
	// Since keeps runs started at or after it.
	Since time.Time
	// Limit is the most runs checked, newest first. Default 1,000.
	Limit int
}

// ReplayFailure is an open run whose history the code does not reproduce.
type ReplayFailure struct {
	WorkflowID string
	RunID      string
	Err        error
}

// CheckError is returned by CheckOpenRuns when runs diverge.
type CheckError struct {
	Checked  int
	Failures []ReplayFailure
}

func (e *CheckError) Error() string {
	f := e.Failures[0]
	return fmt.Sprintf("%d of %d open runs do not replay against this code; first: workflow %s (run %s): %v",
		len(e.Failures), e.Checked, f.WorkflowID, f.RunID, f.Err)
}

// CheckOpenRuns is the pre-deploy replay gate: it replays open runs from
// the database against the code registered on this engine (the build about
// to be deployed), writing nothing, and returns how many it checked, or a
// *CheckError naming every run that diverges with the replayer's report.
// Call it from a test or a deploy step, against production's database.
func (e *Engine) CheckOpenRuns(ctx context.Context, o CheckOptions) (int, error) {
	if o.Limit <= 0 {
		o.Limit = 1000
	}
	runs, err := e.store.ListRuns(ctx, store.ListRunsParams{
		Status: store.StatusRunning, WorkflowType: o.WorkflowType, Since: o.Since, Limit: o.Limit,
	})
	if err != nil {
		return 0, err
	}
	ce := &CheckError{}
	for _, r := range runs {
		events, err := e.store.ListEvents(ctx, r.RunID, 0)
		if err != nil {
			return ce.Checked, err
		}
		h := history.History{Version: history.FormatVersion, WorkflowID: r.WorkflowID, RunID: r.RunID, WorkflowType: r.WorkflowType, Events: events}
		ce.Checked++
		if err := e.Replay(ctx, h); err != nil {
			if ctx.Err() != nil {
				return ce.Checked, ctx.Err()
			}
			ce.Failures = append(ce.Failures, ReplayFailure{WorkflowID: r.WorkflowID, RunID: r.RunID, Err: err})
		}
	}
	if len(ce.Failures) > 0 {
		return ce.Checked, ce
	}
	return ce.Checked, nil
}
