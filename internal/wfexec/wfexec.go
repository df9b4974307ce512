// Package wfexec is the bridge between the engine and package workflow's
// replay executor. Package workflow sets New in its init function; the engine
// calls it. Nothing here is for users.
package wfexec

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
)

// Func is a registered workflow function with its payloads still encoded.
// Its first argument is a workflow.Context (typed any to avoid an import cycle).
type Func = func(ctx any, input json.RawMessage) (json.RawMessage, error)

// Options configure one executor.
type Options struct {
	RunID        string
	WorkflowID   string
	WorkflowType string
	// Func runs the workflow. Package workflow converts it to its own type.
	Func any
	// ResolveActivity returns the registered name and the registration
	// options of an activity function passed to workflow.ExecuteActivity.
	ResolveActivity func(fn any) (string, activity.Options)
	// ResolveWorkflow returns the registered name and queue of a workflow
	// function passed to workflow.ExecuteChildWorkflow.
	ResolveWorkflow func(fn any) (name, queue string)
	// DeadlockTimeout is how long workflow code may run without yielding
	// (returning, or a blocking workflow call) before its task fails with a
	// *workflow.DeadlockError. Zero means 1s; negative, no bound.
	DeadlockTimeout time.Duration
	// Logger is the base of workflow.Logger.
	Logger *slog.Logger
	// Trace, if set, is told each step of the replay: kind is "event" (an
	// event delivered to the code), "command" (a recorded command matched
	// with the code's call), or "log" (a line the workflow logged, which
	// replay otherwise drops).
	Trace func(eventID int64, kind, text string)
}

// Executor runs one workflow run's code against its history.
type Executor interface {
	// Apply feeds events, which must continue the history from the last
	// applied event, and runs the workflow's coroutines after each event that
	// delivers something. Events with IDs up to replayedUpTo were processed
	// by an earlier task, so the workflow logger is silent for them. A
	// mismatch between history and code returns a *workflow.NonDeterminismError,
	// a panic in workflow code a *workflow.PanicError, code that does not
	// yield within Options.DeadlockTimeout a *workflow.DeadlockError (and so
	// does every later Apply: the executor is poisoned); the executor is then
	// unusable and must be closed, and nothing it produced committed.
	Apply(events []history.Event, replayedUpTo int64) error
	// TakeCommands returns the commands produced since the last call that
	// history does not hold yet, in order.
	TakeCommands() []history.Attributes
	// LastEventID is the ID of the last applied event.
	LastEventID() int64
	// LastEventTime is the latest time of the events applied: the store
	// stamps no event of the run earlier than that.
	LastEventTime() time.Time
	// HoldLogs holds back what the workflow logs from now on, until
	// ReleaseLogs: the lines of a step that may not take effect (a fused
	// step, refused if the run moved on) are logged only if it does.
	HoldLogs()
	// ReleaseLogs logs the held lines if emit is true, else drops them,
	// and stops holding.
	ReleaseLogs(emit bool)
	// StartedAt is the time of the run's WorkflowStarted event.
	StartedAt() time.Time
	// HasChildren reports whether the run started child workflows.
	HasChildren() bool
	// OnlyTimers reports whether the run waits on nothing but timers (or
	// on nothing the engine sends), so it may as well leave memory.
	OnlyTimers() bool
	// Pending describes what the run waits for: open activities, timers,
	// children, and signals not yet taken.
	Pending() []string
	// TimerPending reports whether timer seq was started and has neither
	// fired nor been canceled.
	TimerPending(seq int64) bool
	// Query answers a query from the state the run has reached, without
	// changing it.
	Query(name string) (json.RawMessage, error)
	// Close stops the run's coroutines.
	Close()
}

// New creates an executor. It is set by package workflow.
var New func(Options) Executor
