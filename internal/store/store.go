// Package store defines the one seam between the engine and its database.
//
// Each method is one engine step and one transaction: it does all of its writes
// or none. Times the store compares or writes come in as parameters from the
// engine's clock; a store never reads the wall clock itself. The Postgres
// implementation lives in store/postgres; storetest is the conformance suite
// every implementation must pass.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/durable-go/durable/history"
)

var (
	// ErrNotFound is returned when a run, task or dead letter does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when an open run already has the workflow ID,
	// or a pending job the idempotency key (RedriveDeadLetter).
	ErrConflict = errors.New("conflict")
	// ErrLeaseLost is returned when a write is made on the strength of a claim
	// that is no longer held: the task was completed, or claimed again by
	// another worker. The write is refused and nothing changes.
	ErrLeaseLost = errors.New("lease lost")
	// ErrRunClosed is returned when a change is asked of a closed run.
	ErrRunClosed = errors.New("run closed")
	// ErrRunMoved is returned by a commit that records an activity outcome
	// (CommitWorkflowTaskParams.Outcome) when the run is not as the commit
	// saw it: it has other new events, or it closed. Nothing changes; the
	// outcome is to be recorded on its own (ResolveActivity).
	ErrRunMoved = errors.New("run moved on")
	// ErrActivityCanceled is returned by HeartbeatActivity when the
	// activity's task is gone because its workflow canceled the activity
	// or its run closed, not because another attempt took it.
	ErrActivityCanceled = errors.New("activity canceled")
)

// Run statuses.
const (
	StatusRunning        = "running"
	StatusCompleted      = "completed"
	StatusFailed         = "failed"
	StatusCanceled       = "canceled"
	StatusTerminated     = "terminated"
	StatusContinuedAsNew = "continued_as_new"
)

// Run is a workflow run as the store keeps it.
type Run struct {
	RunID        string
	WorkflowID   string
	WorkflowType string
	Queue        string
	Status       string
	Input        json.RawMessage
	Result       json.RawMessage
	Failure      *history.Failure
	CreatedAt    time.Time
	UpdatedAt    time.Time
	ClosedAt     *time.Time
	// LastEventID is the ID of the last event in the run's history.
	LastEventID int64
	// TaskError is the error of the run's last failed workflow task (a panic, a
	// non-determinism error, an unregistered type), or empty.
	TaskError string
	// TaskAttempts is how many times the run's pending workflow task has failed.
	TaskAttempts int
	// FirstTaskAt is when the run's first workflow task is due, while no
	// worker has claimed it (see CreateRunParams.StartAt); nil after.
	FirstTaskAt *time.Time
	// Waiter is the engine that may wait for the run's close (see
	// CreateRunParams.Waiter): empty for anyone, "*" for engines besides
	// the one that started it.
	Waiter string
	// Token is set by CreateRun when CreateRunParams.ClaimAs claimed the
	// run's first workflow task: the claim's fencing token.
	Token int64
	// Ready is set by CreateRun with CreateRunParams.First: the activities
	// the first task made ready, or claimed for the starting worker.
	Ready Ready
}

// CreateRunParams are the inputs of CreateRun.
type CreateRunParams struct {
	RunID        string
	WorkflowID   string
	WorkflowType string
	Queue        string
	Input        json.RawMessage
	// TraceContext is the starting span's W3C traceparent, or empty.
	TraceContext string
	Now          time.Time
	// Notify makes the store announce the new task itself (with NOTIFY, at
	// commit). The engine sets it when the write happens in a caller's
	// transaction, whose commit it cannot see.
	Notify bool
	// Waiter, if set, is the ID of the starting engine: the only one that
	// may wait for the run's close until another says it waits too
	// (WatchRun). Empty means anyone may.
	Waiter string
	// StartAt, if after Now, is when the run's first workflow task becomes
	// ready (a delayed start); zero means Now. ClaimAs and First must not
	// be set with it.
	StartAt time.Time
	// ClaimAs, if set, claims the run's first workflow task for that worker
	// for Lease (a hand-off: the starting engine runs it without a claim).
	ClaimAs string
	Lease   time.Duration
	// First, if set, is the run's first workflow task, run by the starting
	// engine before the insert (an eager start): its events, activities and
	// timers are recorded with the run, after its WorkflowStarted event, and
	// the run has no workflow task. It must be a first task (see IsFirst); its
	// RunID, Now and ProcessedEventID (1) match the run's. ClaimAs does not
	// apply.
	First *CommitWorkflowTaskParams
}

// Started is the first event of the run CreateRun creates.
func (in CreateRunParams) Started() history.WorkflowStarted {
	return history.WorkflowStarted{
		WorkflowType: in.WorkflowType,
		WorkflowID:   in.WorkflowID,
		Queue:        in.Queue,
		Input:        in.Input,
		Attempt:      1,
		Format:       history.FormatTasks,
	}
}

// Ready says what a write made ready, so the engine can wake the workers
// concerned. Store writes do not notify by themselves (except as said):
// Postgres serializes the commits of all transactions that NOTIFY, so the
// engine batches notifications instead.
type Ready struct {
	// WorkflowQueues have a workflow task that became ready now.
	WorkflowQueues []string
	// ActivityQueues have an activity task that became ready now.
	ActivityQueues []string
	// ClosedRun is set when the write closed a run, and Closed says how.
	// CloseWaiter is the closed run's Waiter, when the write read it: the
	// close needs announcing to other engines unless it names the closing
	// engine.
	ClosedRun   string
	Closed      *CloseRun
	CloseWaiter string
	// TimerAt is the earliest timer the write created, if any.
	TimerAt *time.Time
	// FirstEventID is the ID CommitWorkflowTask gave the first of its events.
	FirstEventID int64
	// WorkflowTasks and ActivityTasks were claimed for the writing worker
	// (see ClaimAs): it runs them itself.
	WorkflowTasks []WorkflowTask
	ActivityTasks []ActivityTask
	// Next is the task CommitWorkflowTaskParams.ClaimNext claimed, if any.
	Next *ActivityTask
}

// ClaimParams are the inputs of the Claim methods.
type ClaimParams struct {
	Queue    string
	WorkerID string
	// Limit is the most tasks to claim.
	Limit int
	Now   time.Time
	// Lease is how long a workflow task claim holds before another worker may
	// take the task. Activity tasks carry their own lease.
	Lease time.Duration
	// Types, if not nil, limits the claim to these workflow or activity
	// types: a worker claims only what it can run.
	Types []string
	// Prefer, in an activity claim, names tasks to claim first, if they are
	// ready and not locked; the rest of Limit goes in queue order.
	Prefer []ActivityKey
	// PreferEarly makes a preferred task that has never been tried ready for
	// this claim up to PreferEarly before its RunAfter: an engine holds the
	// activities it schedules without a free slot back from other engines
	// that long (NewActivityTask.RunAfter), and claims them itself as soon as
	// it has a slot.
	PreferEarly time.Duration
	// OldestFirst makes the claim take one of the queue's oldest ready
	// tasks before the preferred ones (then the preferred, then the oldest
	// again): an engine that always has preferred tasks leaves no others
	// waiting for good.
	OldestFirst bool
}

// ActivityKey names a run's activity task: its run and its command
// sequence number.
type ActivityKey struct {
	RunID string
	Seq   int64
}

// FireTimersParams are the inputs of a timer fire that claims the workflow
// tasks it makes: the firing worker runs them without a claim of its own.
type FireTimersParams struct {
	Now time.Time
	// Limit is the most timers to fire.
	Limit int
	// ClaimAs, if set, claims for that worker, with a lease of Lease, the
	// new workflow tasks of runs of Types, at most Claim[queue] on each
	// queue. The others are left ready for any worker.
	ClaimAs string
	Lease   time.Duration
	Claim   map[string]int
	Types   []string
	// Skip are runs whose timers this fire leaves alone: the firing engine
	// is waking them itself (a fused step).
	Skip []string
}

// WorkflowTask is a claimed workflow task.
type WorkflowTask struct {
	RunID        string
	WorkflowID   string
	WorkflowType string
	Queue        string
	// Token fences the claim: writes made for this task must present it.
	Token int64
	// LockedUntil is when the claim's lease ends, by the clock of the
	// claim's Now: after it, another worker may claim the task.
	LockedUntil time.Time
	// ProcessedEventID is the last event a committed workflow task of the run
	// has consumed; events after it are new to the workflow.
	ProcessedEventID int64
	// Attempts counts the task's earlier failures.
	Attempts int
	// TraceContext is the run's W3C traceparent, or empty.
	TraceContext string
	// ParentRunID is the parent's run, for a child workflow.
	ParentRunID string
	// Events, when set by a hand-off, are the events the handing
	// transaction appended; a worker whose cached run ends just before them
	// need not read the history. ClaimWorkflowTasks sets them to the whole
	// history of a run whose first task it claimed (no workflow task had
	// consumed an event), read after the claim. The engine also sets
	// them to a whole history it read for several claimed tasks at once.
	Events []history.Event
}

// NewActivityTask is an activity task to create.
type NewActivityTask struct {
	// Seq is the activity's command sequence number in its run.
	Seq      int64
	Activity string
	Queue    string
	Input    json.RawMessage
	// IdempotencyKey is stable across attempts; unique among activity tasks.
	IdempotencyKey string
	// MaxAttempts is the attempt budget; 0 means unlimited.
	MaxAttempts int
	// Options are the activity's options as JSON, kept for the workers.
	Options json.RawMessage
	// Lease is how long one claim of the task holds (the start-to-close timeout).
	Lease    time.Duration
	RunAfter time.Time
	// ClaimAs, if set, claims the task for that worker at once (attempt 1),
	// to run it without a claim transaction. It must be due now.
	ClaimAs string
}

// NewTimer is a durable timer to create.
type NewTimer struct {
	Seq    int64
	FireAt time.Time
}

// CommitWorkflowTaskParams are the inputs of CommitWorkflowTask.
type CommitWorkflowTaskParams struct {
	RunID string
	// WorkflowID and WorkflowQueue describe the run, for the activity tasks
	// the commit claims.
	WorkflowID    string
	WorkflowQueue string
	TraceContext  string
	Token         int64
	// ProcessedEventID is the last history event the task consumed.
	ProcessedEventID int64
	// NextEventID, if set, is the run's next event ID when the task read
	// its history. The commit then takes effect only if nothing was
	// appended since, and returns ErrRunMoved, writing nothing, if
	// something was (ErrLeaseLost if the claim is gone). A commit whose
	// Events hold events the task consumed sets it: the outcome of an
	// activity that ran before its schedule committed follows the
	// schedule, and ProcessedEventID is the outcome's ID. An event of
	// another writer before them would change what the code saw. It is
	// not used with Outcome.
	NextEventID int64
	// Events are the commands the task produced, appended in order.
	Events []history.Attributes
	// Activities and Timers are created with the events.
	Activities []NewActivityTask
	Timers     []NewTimer
	// CanceledTimers are removed, and so are the tasks of CanceledActivities.
	CanceledTimers     []int64
	CanceledActivities []int64
	// WaitCanceledActivities are canceled activities whose workflow waits
	// for their attempt to acknowledge (WaitForCancellation): a task with a
	// live claim is kept, marked canceled (its heartbeats and retries are
	// refused with ErrActivityCanceled; its outcome is recorded as usual),
	// and any other is removed with an ActivityFailed event of class
	// "canceled" appended.
	WaitCanceledActivities []int64
	// ContinueAs, with Close.Status StatusContinuedAsNew, starts the run
	// that continues this one.
	ContinueAs *NewRun
	// Children are child workflows to start. A child whose workflow ID has
	// an open run fails at once (ChildWorkflowFailed in this run).
	Children []NewChild
	// External are signals and cancel requests to other runs (workflow
	// code's SignalExternalWorkflow, RequestCancelExternalWorkflow): each
	// is appended to its target's open run, then its outcome to this run
	// (ExternalRequestCompleted, or ExternalRequestFailed if the target has
	// no open run), which makes this run's workflow task ready again.
	External []ExternalRequest
	// ParentRunID, set for a child that closes, gets the child's outcome.
	ParentRunID string
	// CloseChildren applies the parent-close policies of the run's open
	// children when it closes.
	CloseChildren bool
	// Close, if set, closes the run with this status.
	Close *CloseRun
	Now   time.Time
	// Outcome, if set, records an activity's outcome or a timer's firing in
	// the same transaction (a fused step): the worker that ran the activity,
	// or whose clock the timer came due on, had the run in memory and ran
	// its next workflow task at once. Events[0] is the outcome's event and
	// ProcessedEventID its ID, which must be the run's next; there is no
	// workflow task, so Token is unused. The commit returns ErrLeaseLost if
	// the activity's claim no longer holds and ErrRunMoved if the run has
	// other new events (a timer that fired elsewhere is one) or is closed.
	// Only two shapes may be fused (see Fusable).
	Outcome *Outcome
	// ClaimNext, if set, claims one more activity task (at most; Limit is
	// not read) in the commit's transaction, as ClaimActivityTasks would,
	// and returns it in Ready.Next: the next task for the slot whose
	// activity the commit records, without a claim transaction of its own.
	// It is taken even if the commit is refused (ErrLeaseLost,
	// ErrRunMoved). The store may ignore it: it honours it only where the
	// commit shares a transaction with others (group commit).
	ClaimNext *ClaimParams
}

// Outcome is what a fused step records before its commands: the outcome
// of an activity attempt (TaskID and Attempt), or the firing of the run's
// timer TimerSeq (TaskID 0).
type Outcome struct {
	TaskID   int64
	Attempt  int
	TimerSeq int64
}

// Fusable reports whether a commit's shape may carry an Outcome: events,
// activities and timers (see IsFirst), or a completion of a run that has
// no parent, children or other activities.
func (p CommitWorkflowTaskParams) Fusable() bool {
	if len(p.Events) == 0 { // the outcome is the first event
		return false
	}
	if c := p.Close; c != nil && p.bare() {
		return c.Status == StatusCompleted && p.ParentRunID == "" && len(p.Activities) == 0
	}
	return p.IsFirst()
}

// IsStep reports whether a commit only appends events and schedules
// activities: the commonest shape, which has statements of its own.
func (p CommitWorkflowTaskParams) IsStep() bool { return p.Close == nil && p.bare() }

// IsFirst reports whether a commit can be recorded with the run it belongs
// to (CreateRunParams.First): it appends events, schedules activities and
// starts timers, and nothing else.
func (p CommitWorkflowTaskParams) IsFirst() bool {
	return p.Close == nil && len(p.CanceledTimers) == 0 && len(p.CanceledActivities) == 0 &&
		len(p.Children) == 0 && len(p.External) == 0 && len(p.WaitCanceledActivities) == 0 && p.ContinueAs == nil && !p.CloseChildren
}

// bare reports whether a commit has nothing but events, activities and a
// close.
func (p CommitWorkflowTaskParams) bare() bool {
	return len(p.Timers) == 0 && len(p.CanceledTimers) == 0 && len(p.CanceledActivities) == 0 &&
		len(p.Children) == 0 && len(p.External) == 0 && len(p.WaitCanceledActivities) == 0 && p.ContinueAs == nil && !p.CloseChildren
}

// ExternalRequest is an event for another workflow's open run, sent by a
// commit: a SignalReceived or a WorkflowCancelRequested.
type ExternalRequest struct {
	// Seq is the command's sequence number in the sending run.
	Seq        int64
	WorkflowID string
	// RunID, if set, must be the target's open run.
	RunID string
	Event history.Attributes
}

// NewChild is a child workflow to start.
type NewChild struct {
	Seq               int64
	RunID             string
	WorkflowID        string
	WorkflowType      string
	Queue             string
	Input             json.RawMessage
	ParentClosePolicy string
}

// NewRun is a run started by a commit: the continuation of a run.
type NewRun struct {
	RunID string
	Input json.RawMessage
}

// SignalParams are the inputs of SignalRun.
type SignalParams struct {
	WorkflowID string
	// RunID, if set, must be the open run's: otherwise SignalRun returns
	// ErrRunClosed.
	RunID string
	Now   time.Time
	// Notify makes the store announce the task itself (in a caller's
	// transaction).
	Notify bool
}

// TerminateParams are the inputs of TerminateRun.
type TerminateParams struct {
	WorkflowID string
	Reason     string
	Now        time.Time
}

// CloseRun closes a run.
type CloseRun struct {
	Status  string
	Result  json.RawMessage
	Failure *history.Failure
}

// FailWorkflowTaskParams are the inputs of FailWorkflowTask.
type FailWorkflowTaskParams struct {
	RunID string
	Token int64
	// Error is kept on the run for people to see.
	Error string
	// RunAfter is when the task may be tried again.
	RunAfter time.Time
	Now      time.Time
}

// ActivityTask is a claimed activity task.
type ActivityTask struct {
	ID         int64
	RunID      string // empty for a standalone job
	WorkflowID string
	// WorkflowQueue is the run's workflow queue.
	WorkflowQueue  string
	Seq            int64
	Activity       string
	Queue          string
	Input          json.RawMessage
	IdempotencyKey string
	// Attempt is this claim's attempt number, starting at 1. It fences the claim.
	Attempt     int
	MaxAttempts int
	// RateLimited counts the retries the other side asked for.
	RateLimited int
	Options     json.RawMessage
	LockedUntil time.Time
	// ScheduledAt is when the activity was scheduled or the job enqueued.
	ScheduledAt time.Time
	// LastError is the error of the previous attempt, if any.
	LastError string
	// Heartbeat is the last heartbeat's details, from this or an earlier attempt.
	Heartbeat json.RawMessage
	// TraceContext is the run's W3C traceparent, or empty.
	TraceContext string
}

// ResolveActivityParams are the inputs of ResolveActivity: the activity is
// done, and Event (ActivityCompleted or ActivityFailed) is appended to its run.
type ResolveActivityParams struct {
	// RunID is the task's run (empty for a job); it orders grouped writes.
	RunID   string
	TaskID  int64
	Attempt int
	Event   history.Attributes
	Now     time.Time
	// ClaimAs, if set, claims the run's new workflow task for that worker,
	// with a lease of Lease.
	ClaimAs string
	Lease   time.Duration
	// Held, if set, requires the claim to be held, or the store returns
	// ErrLeaseLost: an outcome from outside the attempt (an asynchronous
	// completion) must not resolve a task that waits for a retry.
	Held bool
}

// HeartbeatParams are the inputs of HeartbeatActivity.
type HeartbeatParams struct {
	TaskID  int64
	Attempt int
	// RunID and Seq name the activity in its run (RunID is empty for a
	// standalone job), to tell a canceled activity from a lost claim.
	RunID string
	Seq   int64
	// Details are kept for the next attempt.
	Details json.RawMessage
	// LockedUntil is the extended end of the claim.
	LockedUntil time.Time
	// HandOff, if set, passes the claim to that holder and keeps the
	// details there are (Details is unused): the attempt's worker no
	// longer holds it, nor gives it back on shutdown, and its result
	// comes later from anywhere (ResolveActivityParams.Held).
	HandOff string
}

// EnqueueJobParams are the inputs of EnqueueJob. Task.Seq is unused.
type EnqueueJobParams struct {
	Task NewActivityTask
	Now  time.Time
	// Notify makes the store announce the job itself, as for CreateRun.
	Notify bool
}

// Dead-letter kinds.
const (
	DeadJob      = "job"
	DeadWorkflow = "workflow"
)

// DeadLetter is a job or workflow run that failed for good.
type DeadLetter struct {
	ID             int64
	Kind           string // DeadJob or DeadWorkflow
	Type           string // activity or workflow type
	Queue          string
	Payload        json.RawMessage
	IdempotencyKey string
	RunID          string
	WorkflowID     string
	Attempts       int
	LastError      string
	ErrorClass     string
	Options        json.RawMessage
	FirstFailedAt  time.Time
	DeadLetteredAt time.Time
	RedrivenAt     *time.Time
	// RedriveRunID is the run a redriven workflow continues in.
	RedriveRunID string
}

// DeadLetterFilter selects dead letters; zero fields match everything.
type DeadLetterFilter struct {
	Kind string
	Type string
	// Pending keeps only those not redriven yet.
	Pending bool
	// BeforeID keeps those with IDs below it, to page newest first: pass
	// the last ID of one page to get the next. 0 means no bound.
	BeforeID int64
	Limit    int
}

// RedriveParams are the inputs of RedriveDeadLetter.
type RedriveParams struct {
	ID  int64
	Now time.Time
	// NewRunID names the run a redriven workflow continues in.
	NewRunID string
	// Task builds the activity task that runs again: the job itself, or the
	// workflow's failed activity (a is its ActivityScheduled event).
	Task func(runID string, a history.ActivityScheduled) (NewActivityTask, error)
}

// RedriveResult says what a redrive did.
type RedriveResult struct {
	// Redriven is false when the dead letter had been redriven already.
	Redriven bool
	// RunID is the run a workflow continues in.
	RunID string
	Ready Ready
	// With ErrConflict, what holds the dead letter back: the task of the
	// pending job that holds a job's idempotency key, or the open run that
	// holds a workflow's ID.
	PendingTaskID int64
	OpenRunID     string
}

// RetryActivityParams are the inputs of RetryActivity.
type RetryActivityParams struct {
	TaskID   int64
	Attempt  int
	RunAfter time.Time
	Error    string
	// ErrorClass is the error's kind (see activity.ErrorClass).
	ErrorClass string
	// RateLimited marks a retry the other side asked for: it gives the
	// attempt back to the budget and counts against the rate-limit cap.
	RateLimited bool
	Now         time.Time
}

// ReleaseParams are the inputs of the Release methods: claims a worker gives
// back unworked, on shutdown, or one task it claimed for a slot that did not
// free up in time.
type ReleaseParams struct {
	WorkerID string
	Now      time.Time
	// TaskID, if set, gives back only that activity task, and only while
	// the worker holds it as attempt Attempt (ReleaseActivityTasks alone
	// reads them).
	TaskID  int64
	Attempt int
}

// Store is the engine's view of its database. Users never implement it.
type Store interface {
	// CreateRun inserts a running run, its WorkflowStarted event and a ready
	// workflow task. If an open run already has in.WorkflowID it returns that
	// run and ErrConflict.
	CreateRun(ctx context.Context, in CreateRunParams) (Run, error)
	// GetRun returns the run, or ErrNotFound.
	GetRun(ctx context.Context, runID string) (Run, error)
	// GetRunByWorkflowID returns the newest run with the workflow ID, or ErrNotFound.
	GetRunByWorkflowID(ctx context.Context, workflowID string) (Run, error)
	// WatchRun records that engines besides the one the run's Waiter names
	// wait for its close (Waiter becomes "*"), so that the close is
	// announced to them. It reports false, changing nothing, if the run is
	// not running (closed, or there is no such run).
	WatchRun(ctx context.Context, runID string) (bool, error)
	// NotRunning returns those of runIDs that name no running run: runs
	// that have closed, and IDs of no run (a string that is not a run ID
	// among them). It is Result's backstop for closes whose notification
	// was lost: one statement for every run an engine waits on.
	NotRunning(ctx context.Context, runIDs []string) ([]string, error)
	// ListEvents returns the run's events with IDs above afterID, in order.
	ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error)

	// ClaimWorkflowTasks claims up to in.Limit ready workflow tasks.
	ClaimWorkflowTasks(ctx context.Context, in ClaimParams) ([]WorkflowTask, error)
	// CommitWorkflowTask appends the task's events and applies its effects.
	// It returns ErrLeaseLost if the claim token no longer holds.
	CommitWorkflowTask(ctx context.Context, in CommitWorkflowTaskParams) (Ready, error)
	// FailWorkflowTask releases the task for a later retry and keeps the error.
	// It returns ErrLeaseLost if the claim token no longer holds.
	FailWorkflowTask(ctx context.Context, in FailWorkflowTaskParams) error
	// ReleaseWorkflowTasks gives back every workflow task the worker holds,
	// and notifies.
	ReleaseWorkflowTasks(ctx context.Context, in ReleaseParams) error

	// ClaimActivityTasks claims up to in.Limit ready activity tasks, raising
	// each one's attempt number.
	ClaimActivityTasks(ctx context.Context, in ClaimParams) ([]ActivityTask, error)
	// ResolveActivity deletes the task and appends its outcome to its run,
	// making a workflow task ready. It returns ErrLeaseLost if the task is gone
	// or was claimed again (a late duplicate completion).
	ResolveActivity(ctx context.Context, in ResolveActivityParams) (Ready, error)
	// RetryActivity releases the task to be tried again at in.RunAfter.
	// It returns ErrActivityCanceled if the workflow canceled the activity
	// while it ran (WaitCanceledActivities), and ErrLeaseLost if the claim
	// no longer holds.
	RetryActivity(ctx context.Context, in RetryActivityParams) error
	// NextDue returns when the earliest task of the kind ("workflow" or
	// "activity") on the queue becomes ready, or ok false if there is none.
	NextDue(ctx context.Context, kind, queue string) (t time.Time, ok bool, err error)
	// UnstartedActivities returns up to limit activity tasks, oldest first,
	// that no attempt has claimed yet and whose ScheduleToStartTimeout (in
	// their Options) ended at or before now. The engine fails each for good
	// with ResolveActivity at Attempt 0, which a claim since then refuses.
	UnstartedActivities(ctx context.Context, now time.Time, limit int) ([]ActivityTask, error)
	// SignalRun appends an event (SignalReceived, WorkflowCancelRequested)
	// to the open run of a workflow ID and makes a workflow task ready. It
	// returns ErrNotFound if no run has the ID and ErrRunClosed if none is
	// open.
	SignalRun(ctx context.Context, in SignalParams, event history.Attributes) (Ready, error)
	// TerminateRun closes the open run of a workflow ID at once with a
	// WorkflowTerminated event, dropping its tasks and timers. Errors as
	// SignalRun.
	TerminateRun(ctx context.Context, in TerminateParams) (Ready, error)

	// HeartbeatActivity keeps the details and extends the claim. It returns
	// ErrActivityCanceled if the activity's run canceled it or closed
	// without an outcome of it, and ErrLeaseLost if the claim no longer
	// holds for any other reason.
	HeartbeatActivity(ctx context.Context, in HeartbeatParams) error
	// EnqueueJob adds a standalone job unless a job with its idempotency key
	// is pending; it returns the job's task ID and whether it existed.
	EnqueueJob(ctx context.Context, in EnqueueJobParams) (id int64, existing bool, err error)

	// ListDeadLetters returns dead letters, newest first.
	ListDeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error)
	// GetDeadLetter returns one dead letter, or ErrNotFound.
	GetDeadLetter(ctx context.Context, id int64) (DeadLetter, error)
	// RedriveDeadLetter runs a dead letter again: a job with a fresh attempt
	// budget; a workflow as a new run of the same workflow ID whose history
	// is the failed run's up to its last activity failure, with that
	// activity scheduled again (or, if no activity failed, with a workflow
	// task). Redriving twice does nothing the second time. It returns
	// ErrNotFound for an unknown ID. It returns ErrConflict, doing nothing
	// and leaving the dead letter pending, if a pending job holds the job's
	// idempotency key (the result's PendingTaskID names its task) or the
	// workflow ID has an open run (OpenRunID names it).
	RedriveDeadLetter(ctx context.Context, in RedriveParams) (RedriveResult, error)

	// ReleaseActivityTasks gives back, without spending an attempt, the
	// activity tasks the worker holds (or the one in.TaskID names), and
	// notifies. A claim the worker no longer holds is left alone.
	ReleaseActivityTasks(ctx context.Context, in ReleaseParams) error

	// FireTimers fires up to in.Limit timers due at in.Now, each with its
	// run's TimerFired event and a ready workflow task, skipping the runs
	// in in.Skip, and claims the tasks it makes as in.ClaimAs asks.
	FireTimers(ctx context.Context, in FireTimersParams) (Fired, []WorkflowTask, error)
	// NextTimer returns the earliest fire time of a timer of a run not in
	// skip, or ok false if there is none.
	NextTimer(ctx context.Context, skip []string) (at time.Time, ok bool, err error)

	// Notify sends notes to every engine listening (Listen), its own
	// included. A note may be lost (an engine that was not listening, a
	// failed send): notes save latency, never work, and every listener
	// polls as a backstop. In a store bound to a transaction, the notes
	// go out when it commits.
	Notify(ctx context.Context, notes []Note) error
	// Listen delivers the notes of every engine until ctx ends or the
	// connection fails, which it returns. It calls onListen once it
	// listens: notes sent after that reach deliver.
	Listen(ctx context.Context, onListen func(), deliver func(Note)) error

	// StartGroupCommit makes concurrent writes of different runs commit
	// together, on up to flushers connections, at most max per
	// transaction, until stop is called. A store without groups returns a
	// stop that does nothing.
	StartGroupCommit(flushers, max int) (stop func())

	// InTx runs fn with a store whose calls all happen in one new
	// transaction, which commits if fn returns nil and rolls back
	// otherwise: fn's writes take effect together or not at all (a start
	// and a signal, say). Writes inside announce themselves at the commit
	// only if their parameters ask for it (Notify).
	InTx(ctx context.Context, fn func(s Store) error) error

	// Now reads the database's clock: the clock leases and timers are due
	// by, shared by every engine.
	Now(ctx context.Context) (time.Time, error)
	// Transient reports whether err, from a method of this store, is the
	// database being unreachable or busy for a while (worth retrying, and
	// saying nothing about the run) rather than an answer.
	Transient(err error) bool

	// Migrate applies the schema migrations the database lacks and
	// returns their versions.
	Migrate(ctx context.Context) ([]int, error)
	// Migrations returns the migrations this build has, in order.
	Migrations() []Migration
	// SchemaVersion returns the database's schema version beside the one
	// this build needs.
	SchemaVersion(ctx context.Context) (Schema, error)
	// ListAppliedMigrations returns the migrations applied, in order.
	ListAppliedMigrations(ctx context.Context) ([]AppliedMigration, error)

	// RecordEngine records a running engine, or records it again: its
	// SeenAt becomes the database's now, and its StartedAt stays what
	// the first record said.
	RecordEngine(ctx context.Context, e EngineRecord) error
	// ForgetEngine removes the engine's record; an unknown one is no
	// error.
	ForgetEngine(ctx context.Context, workerID string) error
	// ListEngines returns the engines recorded, by worker ID; none on a
	// schema that predates the record.
	ListEngines(ctx context.Context) ([]EngineRecord, error)

	// ListEventsOfRuns returns the whole histories of runs, by run ID.
	ListEventsOfRuns(ctx context.Context, runIDs []string) (map[string][]history.Event, error)
	// ListRuns returns the runs that match in, newest first.
	ListRuns(ctx context.Context, in ListRunsParams) ([]RunSummary, error)
	// ListPendingActivities returns the run's unfinished activities in the
	// order they were scheduled. An unknown run has none.
	ListPendingActivities(ctx context.Context, runID string) ([]PendingActivity, error)
	// ListPendingTimers returns the run's timers that have not fired,
	// earliest first.
	ListPendingTimers(ctx context.Context, runID string) ([]PendingTimer, error)
	// QueueStats returns, for every queue with tasks or timers, in name
	// order, its ready, running and waiting tasks and pending timers at now.
	QueueStats(ctx context.Context, now time.Time) ([]QueueStats, error)
	// DeadLetterStats returns the pending dead letters of each kind, jobs
	// first; a kind with none has a row all the same.
	DeadLetterStats(ctx context.Context) ([]DeadLetterStats, error)
	// ActivityStats sums up how activities in workflows ended since
	// in.Since, per activity type.
	ActivityStats(ctx context.Context, in ActivityStatsParams) (ActivityReport, error)
	// IdleUntil reports, when no task runs or is ready at now, the
	// earliest time a timer fires or a task becomes ready: the time a test
	// clock may skip to. ok is false while work runs or is ready, and
	// when nothing is pending.
	IdleUntil(ctx context.Context, now time.Time) (next time.Time, ok bool, err error)
	// ListPendingDeadLetterIDs returns the IDs of the dead letters not
	// redriven yet, of kind and type typ when set, oldest first.
	ListPendingDeadLetterIDs(ctx context.Context, kind, typ string) ([]int64, error)
}

// NoteKind says what a Note announces.
type NoteKind uint8

const (
	// NoteWorkflowTasks: a workflow task of Queue is ready.
	NoteWorkflowTasks NoteKind = iota + 1
	// NoteActivityTasks: an activity task of Queue is ready.
	NoteActivityTasks
	// NoteTimers: a timer was created that may fire before the ones known.
	NoteTimers
	// NoteClosed: run RunID closed; Close, if set, is how.
	NoteClosed
)

// Note is a notification from one engine to all: work that became ready,
// or a run that closed.
type Note struct {
	Kind  NoteKind
	Queue string
	RunID string
	// Close is how the run closed, if it fits in a notification: a
	// Result waiting in another process then needs no read of the run.
	// The store may drop it (too long); the sender leaves it nil for
	// payloads the receiver could not read.
	Close *CloseRun
}
