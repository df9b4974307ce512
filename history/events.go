package history

import (
	"encoding/json"
	"time"
)

// Event is one entry of a run's history.
type Event struct {
	// ID is the event's position in the history, starting at 1.
	ID int64 `json:"id"`
	// Time is when the event was recorded, by the engine's clock.
	Time time.Time `json:"time"`
	// Attributes says what happened.
	Attributes Attributes `json:"-"`
}

// Type returns the wire name of the event's attributes.
func (e Event) Type() string {
	if e.Attributes == nil {
		return ""
	}
	return e.Attributes.EventType()
}

// Attributes is implemented by every event payload type of this package. The set
// is closed: types outside this package cannot implement it.
type Attributes interface {
	// EventType returns the stable wire name of the event.
	EventType() string
	// IsCommand reports whether workflow code produces this event (and replay
	// must match it) rather than receiving it.
	IsCommand() bool
	sealed()
}

// Failure describes an error as it is recorded in history: enough to show a
// person what went wrong and to let workflow code decide what to do.
type Failure struct {
	// Message is the error's text.
	Message string `json:"message"`
	// Class is the error's kind: "permanent", "rate_limited", "timeout",
	// "panic", or the Go type of the underlying error.
	Class string `json:"class,omitempty"`
	// Attempts is how many attempts were made, for activity failures.
	Attempts int `json:"attempts,omitempty"`
	// Stack is a stack trace, for panics.
	Stack string `json:"stack,omitempty"`
	// Type is the type name of an application error (see
	// activity.NewApplicationError); empty for other errors.
	Type string `json:"type,omitempty"`
	// Details is the JSON details of an application error, or nil.
	Details json.RawMessage `json:"details,omitempty"`
	// NonRetryable is set for an application error made non-retryable.
	NonRetryable bool `json:"non_retryable,omitempty"`
}

// WorkflowStarted is the first event of every run.
type WorkflowStarted struct {
	WorkflowType string          `json:"workflow_type"`
	WorkflowID   string          `json:"workflow_id"`
	Queue        string          `json:"queue"`
	Input        json.RawMessage `json:"input"`
	// Attempt is 1, or more for a run redriven after it failed.
	Attempt int `json:"attempt,omitempty"`
	// Format is the set of rules the run's history is recorded under (see
	// FormatTasks); 0 for runs started before those rules existed.
	Format int `json:"format,omitempty"`
}

// FormatTasks is the history format of runs started since 2026-12-03.
// The events that reach one workflow task together (the events between
// two of the task's commands) are delivered to the code together, before
// it runs, live and in replay alike; so a signal recorded with the start
// is in its channel when the code first looks. A workflow task commits
// only on the history it saw, and one that made no command records
// WorkflowTaskCompleted, so that replay knows where each task began.
//
// Under format 0 each event reached the code alone, in order; runs of
// that format keep those rules to their end.
const FormatTasks = 1

// WorkflowCompleted is written when the workflow function returns a result.
type WorkflowCompleted struct {
	Result json.RawMessage `json:"result"`
}

// WorkflowFailed is written when the workflow function returns an error.
type WorkflowFailed struct {
	Failure Failure `json:"failure"`
}

// ActivityScheduled is written when workflow code calls an activity.
type ActivityScheduled struct {
	// Seq identifies the command within the run; later events refer to it.
	Seq      int64           `json:"seq"`
	Activity string          `json:"activity"`
	Queue    string          `json:"queue"`
	Input    json.RawMessage `json:"input"`
	// Options are the activity's timeouts and retry policy, as JSON.
	Options json.RawMessage `json:"options,omitempty"`
}

// ActivityCompleted is written when an activity returns a result.
type ActivityCompleted struct {
	Seq     int64           `json:"seq"`
	Result  json.RawMessage `json:"result"`
	Attempt int             `json:"attempt"`
}

// ActivityFailed is written when an activity fails for good: a permanent error,
// or its retries are spent.
type ActivityFailed struct {
	Seq     int64   `json:"seq"`
	Failure Failure `json:"failure"`
}

// TimerStarted is written when workflow code starts a durable timer.
type TimerStarted struct {
	Seq    int64     `json:"seq"`
	FireAt time.Time `json:"fire_at"`
}

// TimerFired is written when a timer's time has come.
type TimerFired struct {
	Seq int64 `json:"seq"`
}

// TimerCanceled is written when workflow code cancels a timer before it fired.
type TimerCanceled struct {
	Seq int64 `json:"seq"`
}

// SideEffectRecorded keeps the value of a workflow.SideEffect call so replay
// returns the same value without running the function again.
type SideEffectRecorded struct {
	Seq   int64           `json:"seq"`
	Value json.RawMessage `json:"value"`
}

// SignalReceived is written when a signal is sent to the run.
type SignalReceived struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
}

// WorkflowCancelRequested is written when someone asks the run to cancel.
type WorkflowCancelRequested struct {
	Reason string `json:"reason,omitempty"`
}

// WorkflowCanceled is written when the workflow returns after a cancel
// request with a canceled error.
type WorkflowCanceled struct {
	Reason string `json:"reason,omitempty"`
}

// WorkflowTerminated is written when the run is stopped at once, without
// running workflow code.
type WorkflowTerminated struct {
	Reason string `json:"reason,omitempty"`
}

// ActivityCanceled is written when workflow code gives up on an activity
// (the run was canceled); its task is removed.
type ActivityCanceled struct {
	Seq int64 `json:"seq"`
	// Wait is set for an activity with WaitForCancellation: its task is
	// kept, marked canceled, until the running attempt reports, and its
	// outcome event settles the workflow's future.
	Wait bool `json:"wait,omitempty"`
}

// VersionMarker records the version workflow.GetVersion chose for a change.
type VersionMarker struct {
	ChangeID string `json:"change_id"`
	Version  int    `json:"version"`
}

// ExternalSignalScheduled is written when workflow code signals another
// workflow (workflow.SignalExternalWorkflow): the commit that records it
// appends the signal to the target's open run (RunID, if set, must be that
// run) and then ExternalRequestCompleted or ExternalRequestFailed here.
type ExternalSignalScheduled struct {
	Seq        int64           `json:"seq"`
	WorkflowID string          `json:"workflow_id"`
	RunID      string          `json:"run_id,omitempty"`
	Name       string          `json:"name"`
	Payload    json.RawMessage `json:"payload"`
}

// ExternalCancelScheduled is written when workflow code asks another
// workflow to cancel (workflow.RequestCancelExternalWorkflow); as
// ExternalSignalScheduled, with a cancel request instead of a signal.
type ExternalCancelScheduled struct {
	Seq        int64  `json:"seq"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// ExternalRequestCompleted says the signal or cancel request Seq reached
// its target.
type ExternalRequestCompleted struct {
	Seq int64 `json:"seq"`
}

// ExternalRequestFailed says the signal or cancel request Seq could not
// reach its target: no open run has its workflow ID (and run ID).
type ExternalRequestFailed struct {
	Seq     int64   `json:"seq"`
	Failure Failure `json:"failure"`
}

func (ExternalSignalScheduled) EventType() string  { return "external_signal_scheduled" }
func (ExternalCancelScheduled) EventType() string  { return "external_cancel_scheduled" }
func (ExternalRequestCompleted) EventType() string { return "external_request_completed" }
func (ExternalRequestFailed) EventType() string    { return "external_request_failed" }
func (ExternalSignalScheduled) IsCommand() bool    { return true }
func (ExternalCancelScheduled) IsCommand() bool    { return true }
func (ExternalRequestCompleted) IsCommand() bool   { return false }
func (ExternalRequestFailed) IsCommand() bool      { return false }
func (ExternalSignalScheduled) sealed()            {}
func (ExternalCancelScheduled) sealed()            {}
func (ExternalRequestCompleted) sealed()           {}
func (ExternalRequestFailed) sealed()              {}

// WorkflowTaskCompleted marks the end of a workflow task that made no
// command (it only waited on): events after it reached the code in a later
// task. Histories of format FormatTasks record it; replay matches it with
// nothing.
type WorkflowTaskCompleted struct{}

// WorkflowContinuedAsNew closes the run and starts a new run of the same
// workflow ID with Input.
type WorkflowContinuedAsNew struct {
	Input    json.RawMessage `json:"input"`
	NewRunID string          `json:"new_run_id"`
}

// ChildWorkflowScheduled is written when workflow code starts a child
// workflow; the child run is created in the same transaction.
type ChildWorkflowScheduled struct {
	Seq          int64           `json:"seq"`
	WorkflowType string          `json:"workflow_type"`
	WorkflowID   string          `json:"workflow_id"`
	RunID        string          `json:"run_id,omitempty"`
	Queue        string          `json:"queue"`
	Input        json.RawMessage `json:"input"`
	// ParentClosePolicy is what happens to the child if the parent closes
	// first: "terminate", "cancel" or "abandon".
	ParentClosePolicy string `json:"parent_close_policy"`
}

// ChildWorkflowStarted is written to the parent, in the transaction that
// records ChildWorkflowScheduled, when the child's run was created (a child
// whose workflow ID has an open run gets ChildWorkflowFailed instead).
type ChildWorkflowStarted struct {
	Seq   int64  `json:"seq"`
	RunID string `json:"run_id"`
}

// ChildWorkflowCompleted is written to the parent when a child completes.
type ChildWorkflowCompleted struct {
	Seq    int64           `json:"seq"`
	Result json.RawMessage `json:"result"`
}

// ChildWorkflowFailed is written to the parent when a child fails, is
// canceled or terminated, or could not start.
type ChildWorkflowFailed struct {
	Seq     int64   `json:"seq"`
	Failure Failure `json:"failure"`
}

func (ChildWorkflowScheduled) EventType() string { return "child_workflow_scheduled" }
func (ChildWorkflowStarted) EventType() string   { return "child_workflow_started" }
func (ChildWorkflowStarted) IsCommand() bool     { return false }
func (ChildWorkflowStarted) sealed()             {}
func (ChildWorkflowCompleted) EventType() string { return "child_workflow_completed" }
func (ChildWorkflowFailed) EventType() string    { return "child_workflow_failed" }
func (ChildWorkflowScheduled) IsCommand() bool   { return true }
func (ChildWorkflowCompleted) IsCommand() bool   { return false }
func (ChildWorkflowFailed) IsCommand() bool      { return false }
func (ChildWorkflowScheduled) sealed()           {}
func (ChildWorkflowCompleted) sealed()           {}
func (ChildWorkflowFailed) sealed()              {}

func (WorkflowStarted) EventType() string         { return "workflow_started" }
func (SignalReceived) EventType() string          { return "signal_received" }
func (WorkflowCancelRequested) EventType() string { return "workflow_cancel_requested" }
func (WorkflowCanceled) EventType() string        { return "workflow_canceled" }
func (WorkflowTerminated) EventType() string      { return "workflow_terminated" }
func (ActivityCanceled) EventType() string        { return "activity_canceled" }
func (VersionMarker) EventType() string           { return "version_marker" }
func (WorkflowContinuedAsNew) EventType() string  { return "workflow_continued_as_new" }
func (SignalReceived) IsCommand() bool            { return false }
func (WorkflowCancelRequested) IsCommand() bool   { return false }
func (WorkflowCanceled) IsCommand() bool          { return true }
func (WorkflowTerminated) IsCommand() bool        { return false }
func (ActivityCanceled) IsCommand() bool          { return true }
func (VersionMarker) IsCommand() bool             { return true }
func (WorkflowContinuedAsNew) IsCommand() bool    { return true }
func (SignalReceived) sealed()                    {}
func (WorkflowCancelRequested) sealed()           {}
func (WorkflowCanceled) sealed()                  {}
func (WorkflowTerminated) sealed()                {}
func (ActivityCanceled) sealed()                  {}
func (VersionMarker) sealed()                     {}
func (WorkflowContinuedAsNew) sealed()            {}
func (WorkflowTaskCompleted) EventType() string   { return "workflow_task_completed" }
func (WorkflowTaskCompleted) IsCommand() bool     { return true }
func (WorkflowTaskCompleted) sealed()             {}
func (WorkflowCompleted) EventType() string       { return "workflow_completed" }
func (WorkflowFailed) EventType() string          { return "workflow_failed" }
func (ActivityScheduled) EventType() string       { return "activity_scheduled" }
func (ActivityCompleted) EventType() string       { return "activity_completed" }
func (ActivityFailed) EventType() string          { return "activity_failed" }
func (TimerStarted) EventType() string            { return "timer_started" }
func (TimerFired) EventType() string              { return "timer_fired" }
func (TimerCanceled) EventType() string           { return "timer_canceled" }
func (SideEffectRecorded) EventType() string      { return "side_effect_recorded" }

func (WorkflowStarted) IsCommand() bool    { return false }
func (WorkflowCompleted) IsCommand() bool  { return true }
func (WorkflowFailed) IsCommand() bool     { return true }
func (ActivityScheduled) IsCommand() bool  { return true }
func (ActivityCompleted) IsCommand() bool  { return false }
func (ActivityFailed) IsCommand() bool     { return false }
func (TimerStarted) IsCommand() bool       { return true }
func (TimerFired) IsCommand() bool         { return false }
func (TimerCanceled) IsCommand() bool      { return true }
func (SideEffectRecorded) IsCommand() bool { return true }

func (WorkflowStarted) sealed()    {}
func (WorkflowCompleted) sealed()  {}
func (WorkflowFailed) sealed()     {}
func (ActivityScheduled) sealed()  {}
func (ActivityCompleted) sealed()  {}
func (ActivityFailed) sealed()     {}
func (TimerStarted) sealed()       {}
func (TimerFired) sealed()         {}
func (TimerCanceled) sealed()      {}
func (SideEffectRecorded) sealed() {}
