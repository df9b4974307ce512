package store

import (
	"encoding/json"
	"time"
)

// The types of the reads that serve operators (the durable command,
// Describe, stats) and of the timer scanner.

// RunSummary is one row of ListRuns: a run without its payloads.
type RunSummary struct {
	RunID        string     `json:"run_id"`
	WorkflowID   string     `json:"workflow_id"`
	WorkflowType string     `json:"workflow_type"`
	Queue        string     `json:"queue"`
	Status       string     `json:"status"`
	CreatedAt    time.Time  `json:"created_at"`
	ClosedAt     *time.Time `json:"closed_at"`
}

// ListRunsParams filter ListRuns. A zero field does not filter.
type ListRunsParams struct {
	// Status keeps runs with this status ("running", "completed", ...).
	Status string
	// WorkflowType keeps runs of this workflow type.
	WorkflowType string
	// WorkflowID keeps the runs of this workflow ID.
	WorkflowID string
	// Since keeps runs created at or after it.
	Since time.Time
	// Limit is the most runs returned. Default 100.
	Limit int
}

// PendingActivity is an activity of a run that has not finished: waiting for
// its first attempt, running, or waiting to be retried.
type PendingActivity struct {
	// TaskID identifies the activity task.
	TaskID int64 `json:"task_id"`
	// Seq is the activity's command sequence number in its run.
	Seq      int64  `json:"seq"`
	Activity string `json:"activity"`
	Queue    string `json:"queue"`
	// Attempts is how many attempts were started so far; 0 before the first.
	Attempts int `json:"attempts"`
	// MaxAttempts is the attempt budget; 0 means unlimited.
	MaxAttempts int `json:"max_attempts"`
	// LastError is the error of the last failed attempt, or empty.
	LastError string `json:"last_error,omitempty"`
	// RunAfter is when the next attempt may start. While an attempt runs it
	// is the end of that attempt's lease.
	RunAfter time.Time `json:"run_after"`
	// LockedBy names the worker running an attempt, or is empty.
	LockedBy string `json:"locked_by,omitempty"`
	// LockedUntil is when the running attempt's lease ends, if one runs.
	LockedUntil *time.Time `json:"locked_until,omitempty"`
	// Input is the activity's input: a payload, which people see only when
	// they ask for it.
	Input json.RawMessage `json:"input,omitempty"`
	// Heartbeat is the details of the last heartbeat, from this attempt or
	// an earlier one, or nil.
	Heartbeat json.RawMessage `json:"heartbeat,omitempty"`
	// Options, RateLimited and ScheduledAt are the task's, for the engine
	// to decide a retry of an attempt failed from elsewhere
	// (engine.FailActivity).
	Options     json.RawMessage `json:"-"`
	RateLimited int             `json:"-"`
	ScheduledAt time.Time       `json:"-"`
}

// PendingTimer is a durable timer of a run that has not fired.
type PendingTimer struct {
	// Seq is the timer's command sequence number in its run.
	Seq    int64     `json:"seq"`
	FireAt time.Time `json:"fire_at"`
}

// AppliedMigration is a row of durable_schema_migrations.
type AppliedMigration struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

// TaskStats counts one queue's workflow or activity tasks at a moment.
type TaskStats struct {
	// Ready tasks may be claimed: their run_after has passed. A task whose
	// lease ran out is ready again.
	Ready int
	// Running tasks are claimed and their lease holds.
	Running int
	// Waiting tasks are due later and not running: delayed jobs, activities
	// waiting to retry.
	Waiting int
	// OldestReady is when the longest-waiting ready task became ready, or
	// nil if none is ready.
	OldestReady *time.Time
}

// QueueStats is the work of one queue at a moment.
type QueueStats struct {
	Queue         string
	WorkflowTasks TaskStats
	ActivityTasks TaskStats
	// Timers counts the queue's runs' timers that have not fired.
	Timers int
	// NextTimer is when the earliest of them fires, or nil.
	NextTimer *time.Time
}

// DeadLetterStats counts the dead letters of one kind not redriven yet.
type DeadLetterStats struct {
	// Kind is store.DeadJob or store.DeadWorkflow.
	Kind    string
	Pending int
	// OldestPending is when the oldest of them was dead-lettered, or nil.
	OldestPending *time.Time
}

// ActivityStats sums up how one activity type's executions in workflows
// ended over a window. Standalone jobs keep no history, so they are not
// counted; those that fail for good are dead letters.
type ActivityStats struct {
	Activity string
	// Completed and Failed count the activities that completed, or failed
	// for good (retries spent, or a permanent error).
	Completed int
	Failed    int
	// Mean, P50 and P95 are the times from scheduled to completed of the
	// completed ones (retries included); zero when none completed. An
	// activity redriven with its workflow counts from the redrive.
	Mean, P50, P95 time.Duration
}

// ActivityStatsParams choose what ActivityStats reads.
type ActivityStatsParams struct {
	// Since starts the window: outcomes at or after it count.
	Since time.Time
	// Limit is the most outcomes read, the latest first, so that the cost
	// of a call does not grow with the window. Default 50,000.
	Limit int
}

// ActivityReport is what ActivityStats found.
type ActivityReport struct {
	// Activities are the counts per activity type, in name order.
	Activities []ActivityStats
	// Capped is true when Limit outcomes were read: older ones in the
	// window, if any, are not counted.
	Capped bool
	// Since is when the outcomes counted start: the window's start, or,
	// when Capped, the time of the oldest outcome read.
	Since time.Time
}

// Fired reports one batch of fired timers.
type Fired struct {
	// Count is how many timers fired.
	Count int
	// Queues are the workflow queues on which tasks became ready.
	Queues []string
	// Timers describe each fired timer.
	Timers []FiredTimer
}

// FiredTimer is one fired timer.
type FiredTimer struct {
	RunID string
	Seq   int64
	// Lag is how late it fired: the fire time minus the due time.
	Lag time.Duration
	// TraceContext is the run's W3C traceparent, or empty.
	TraceContext string
}
