package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/workers"
	"github.com/durable-go/durable/workflow"
)

var (
	// ErrRunNotFound is returned for a workflow or run ID that names no run.
	ErrRunNotFound = errors.New("workflow run not found")
	// ErrAlreadyRunning is returned by Start with StartOptions.RejectIfRunning
	// when a run with the workflow ID is open.
	ErrAlreadyRunning = errors.New("workflow already running")
)

// StartOptions configure one Start.
type StartOptions struct {
	// ID is the workflow ID: at most one run with it is open at a time, so
	// starting twice with the same ID while the first run is open returns
	// that run. Default: a random UUID. At most 1000 bytes.
	ID string
	// Queue is where the run's workflow tasks go. Default: the queue the
	// workflow was registered with, or "default".
	Queue string
	// RejectIfRunning makes Start return ErrAlreadyRunning instead of the
	// open run.
	RejectIfRunning bool
	// StartAt delays the run's start (Temporal's StartDelay): the run is
	// recorded at once, so its workflow ID is taken and it can be
	// described, signalled, canceled or terminated, but its first workflow
	// task, and so its code, runs only once the engine's clock (the
	// database's) reaches StartAt. The delay is durable: it survives
	// restarts of every worker. Signals sent meanwhile are delivered to
	// that first task, they do not end the delay (Temporal's do); a
	// Cancel is seen by the code at StartAt; Terminate closes the run at
	// once. Describe shows it (RunInfo.StartAt). workflow.Now in the first
	// task is the time of the events it applies (the start, the signals),
	// not StartAt: read the time from an activity if the code needs it.
	// Zero, or a time not after
	// now, starts at once. It is a time, not a duration, so that a Start
	// retried with the same options (after a timeout, say) asks for the
	// same instant. A worker polling the run's queue wakes at StartAt,
	// within a few milliseconds, if it was running when the run was
	// started (the start's notification tells it when); one started later
	// learns of it at its first poll.
	StartAt time.Time
}

// Run is a handle on one workflow run. Its result is of type Out.
type Run[Out any] struct {
	// WorkflowID is the user's ID for the workflow.
	WorkflowID string
	// RunID identifies this run among the runs of the workflow ID.
	RunID string
	// Existing is true when Start found this run already open.
	Existing bool
	e        *Engine
	// since, if set, is when Start began to record this run: Result called
	// soon after may trust the engine's record of recent closes instead of
	// reading the run first (hub.subscribeSince).
	since time.Time
}

// Start starts a run of the workflow wf with input in, or returns the open run
// with the same workflow ID. It returns once the run is durably recorded; a
// worker (of this or another engine) then runs it.
//
// An error does not always mean that no run started: a timeout may come
// after the run was recorded. Retrying with the same StartOptions.ID returns
// that run (Existing) while it is open; with RejectIfRunning the retry gets
// ErrAlreadyRunning instead, and once the run has closed a retry starts
// another.
func Start[In, Out any](ctx context.Context, e *Engine, wf func(workflow.Context, In) (Out, error), in In, o StartOptions) (*Run[Out], error) {
	return start[Out](ctx, e, e.store, false, wf, in, o)
}

func start[Out any](ctx context.Context, e *Engine, s store.Store, inTx bool, wf any, in any, o StartOptions) (*Run[Out], error) {
	name, queue, err := e.workflowName(wf)
	if err != nil {
		return nil, fmt.Errorf("start workflow: %w", err)
	}
	if o.Queue != "" {
		queue = o.Queue
	}
	if o.ID == "" {
		o.ID = uuid.NewString()
	}
	if err := checkName("workflow ID", o.ID, maxIDLen); err != nil {
		return nil, fmt.Errorf("start workflow %s: %w", name, err)
	}
	if err := checkName("queue", queue, 200); err != nil {
		return nil, fmt.Errorf("start workflow %s: %w", name, err)
	}
	input, err := encodePayload(in, e.opts.MaxPayloadBytes, "input of workflow "+name)
	if err != nil {
		return nil, fmt.Errorf("start workflow %s: %w", name, err)
	}
	runID := uuid.NewString()
	ctx, span := e.tracer.Start(ctx, "durable.start", trace.WithAttributes(
		attribute.String("durable.workflow.type", name), attribute.String("durable.workflow.id", o.ID),
		attribute.String("durable.run.id", runID)))
	defer span.End()
	params := store.CreateRunParams{
		RunID:        runID,
		TraceContext: encodeTraceContext(ctx),
		WorkflowID:   o.ID,
		WorkflowType: name,
		Queue:        queue,
		Input:        input,
		Now:          e.now(),
		// Inside the caller's transaction only a NOTIFY sent at its commit
		// is right; without a running hub nothing would send ours.
		Notify: inTx || !e.hub.Active(),
		// This engine learns of the run's close without a notification
		// when it closes the run itself; others announce it (see announce).
		Waiter: e.hub.ID,
	}
	// A delayed start is only recorded: its first task must not run here now.
	delayed := o.StartAt.After(params.Now)
	if delayed {
		params.StartAt = o.StartAt
	}
	// A run started outside a transaction by a running engine that runs its
	// type has its first task run here first, and is inserted with it (see
	// eagerStart). If that cannot be, and a workflow slot is free, the run's
	// first task is claimed by its own insert and run here: no claim, no
	// history read, no notification.
	var (
		p     *workers.Pool[store.WorkflowTask]
		eager func(store.Run, error)
	)
	if !inTx && !delayed {
		if e.eagerFits(ctx) {
			eager = e.eagerStart(ctx, &params)
		}
		if eager == nil {
			var done func()
			p, done = e.reserveFirstTask(name, queue)
			defer done()
			if p != nil {
				params.ClaimAs, params.Lease, params.Notify = e.opts.WorkerID, e.opts.WorkflowTaskLease, false
			}
		}
	}
	// A run started here: its close, from now on, will be in the engine's
	// record of recent closes if its LISTEN holds (see Result). That holds
	// for an engine that does not run too, while another Result waits.
	var since time.Time
	if !inTx {
		since = time.Now()
	}
	r, err := s.CreateRun(ctx, params)
	if eager != nil {
		eager(r, err)
		if errors.Is(err, store.ErrUnstorable) {
			// The first task's commands hold what the database cannot
			// (a payload the workflow code made): the run starts the
			// ordinary way, and its task fails, visibly, on a worker.
			params.First, eager = nil, nil
			r, err = s.CreateRun(ctx, params)
		}
	}
	if p != nil {
		if err == nil && r.Token != 0 {
			p.Start(firstTask(params, r.Token))
		} else {
			p.Release()
		}
	}
	existing := errors.Is(err, store.ErrConflict)
	if err != nil && !existing {
		return nil, fmt.Errorf("start workflow %s %q: %w", name, o.ID, err)
	}
	if existing && o.RejectIfRunning {
		return nil, fmt.Errorf("start workflow %s %q: %w (run %s)", name, o.ID, ErrAlreadyRunning, r.RunID)
	}
	// A run inserted with its first task (eager) has no task to announce;
	// one whose statement did not notify is announced here, by a hub that
	// was running then (Publish sends itself if it has stopped since).
	if !existing && p == nil && eager == nil && !params.Notify {
		e.hub.Publish(notify.WorkflowTasks(queue))
	}
	h := &Run[Out]{WorkflowID: r.WorkflowID, RunID: r.RunID, Existing: existing, e: e}
	if !existing {
		h.since = since
	}
	return h, nil
}

// GetRun returns a handle on the newest run of workflowID.
func GetRun[Out any](ctx context.Context, e *Engine, workflowID string) (*Run[Out], error) {
	if err := checkName("workflow ID", workflowID, maxIDLen); err != nil {
		return nil, fmt.Errorf("get run: %w", err)
	}
	r, err := e.store.GetRunByWorkflowID(ctx, workflowID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("get run of workflow %q: %w", workflowID, ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get run of workflow %q: %w", workflowID, err)
	}
	return &Run[Out]{WorkflowID: r.WorkflowID, RunID: r.RunID, e: e}, nil
}

// WorkflowError is returned by Result for a run that failed.
type WorkflowError struct {
	WorkflowID string
	RunID      string
	Failure    history.Failure
}

func (e *WorkflowError) Error() string {
	return fmt.Sprintf("workflow %s (run %s) failed: %s", e.WorkflowID, e.RunID, e.Failure.Message)
}

// resultRetryMin is the first wait of Result after the database failed to
// answer; the waits double up to Options.PollInterval.
const resultRetryMin = 50 * time.Millisecond

// Result waits until the run closes and returns its result, or a
// *WorkflowError if it failed, was canceled or terminated. A run that
// continued as new is followed to the run that continues it. It waits on a
// notification, not a poll; a slow poll (Options.PollInterval) backs it up.
// While the database is unreachable it keeps asking, with backoff. Cancel
// ctx to stop waiting.
func (r *Run[Out]) Result(ctx context.Context) (Out, error) {
	var out Out
	runID := r.RunID
	// A run this process just started was running then; if the engine has
	// recorded every close since (hub.subscribeSince), the first read is
	// needed only if it closed elsewhere.
	sub, watched := r.e.hub.SubscribeSince(runID, r.since)
	defer func() { sub.Close() }()
	backoff := resultRetryMin
	// waitOut waits before asking again after err, if err is the database
	// being unreachable for now (the run goes on without us). It returns
	// false for any other error, and ctx's error if ctx ends first.
	waitOut := func(err error) (bool, error) {
		if !r.e.store.Transient(err) {
			return false, nil
		}
		if !sleepCtx(ctx, backoff) {
			return false, ctx.Err()
		}
		backoff = min(2*backoff, max(r.e.opts.PollInterval, resultRetryMin))
		return true, nil
	}
	for {
		run, err := store.Run{RunID: runID, Status: store.StatusRunning}, error(nil)
		if watched {
			watched = false
		} else {
			run, err = r.e.store.GetRun(ctx, runID)
		}
		if again, cerr := waitOut(err); again {
			continue
		} else if cerr != nil {
			return out, cerr
		}
		backoff = resultRetryMin
		if err == nil && run.Status == store.StatusRunning && run.Waiter != "" && run.Waiter != "*" && run.Waiter != r.e.hub.ID {
			// Its starter is another engine, which would not announce
			// closes it makes itself: say that we wait too.
			running, err := r.e.store.WatchRun(ctx, runID)
			if again, cerr := waitOut(err); again {
				continue
			} else if cerr != nil {
				return out, cerr
			}
			if err != nil {
				return out, fmt.Errorf("result of run %s: %w", runID, err)
			}
			if !running {
				continue // it closed meanwhile: read how
			}
		}
		if err == nil && run.Status == store.StatusRunning {
			// Wait for the close, here or elsewhere; the hub's backstop
			// wakes us too if its notification was lost (backstopLoop).
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case c := <-sub.Closed:
				run.Status, run.Result, run.Failure = c.Status, c.Result, c.Failure
			case <-sub.C:
				select {
				case c := <-sub.Closed: // closed here: no need to read it back
					run.Status, run.Result, run.Failure = c.Status, c.Result, c.Failure
				default:
					continue
				}
			}
		}
		if errors.Is(err, store.ErrNotFound) {
			return out, fmt.Errorf("result of run %s: %w", runID, ErrRunNotFound)
		}
		if err != nil {
			return out, fmt.Errorf("result of run %s: %w", runID, err)
		}
		switch run.Status {
		case store.StatusContinuedAsNew:
			// Follow the workflow ID to the run that continues this one.
			next, err := r.e.store.GetRunByWorkflowID(ctx, r.WorkflowID)
			if again, cerr := waitOut(err); again {
				continue
			} else if cerr != nil {
				return out, cerr
			}
			if err != nil {
				return out, fmt.Errorf("result of run %s: follow continue-as-new: %w", runID, err)
			}
			if next.RunID != runID {
				sub.Close()
				runID = next.RunID
				sub = r.e.hub.SubscribeRun(ctx, runID)
			}
			continue
		case store.StatusCompleted:
			if err := decodePayload(run.Result, &out); err != nil {
				return out, fmt.Errorf("result of run %s: decode into %T: %w", runID, out, err)
			}
			return out, nil
		default:
			f := history.Failure{Message: run.Status}
			if run.Failure != nil {
				f = *run.Failure
			}
			return out, &WorkflowError{WorkflowID: r.WorkflowID, RunID: runID, Failure: f}
		}
	}
}

// RunInfo describes a run.
type RunInfo struct {
	WorkflowID   string
	RunID        string
	WorkflowType string
	Queue        string
	Status       Status
	Input        json.RawMessage
	Result       json.RawMessage
	Failure      *history.Failure
	CreatedAt    time.Time
	ClosedAt     *time.Time
	// LastEventID is the number of events in the run's history.
	LastEventID int64
	// TaskError is the error of the run's last failed workflow task (a panic,
	// non-determinism, a workflow type no worker has), while it is retried.
	TaskError string
	// TaskAttempts counts the failures of the pending workflow task.
	TaskAttempts int
	// PendingActivities are the run's activities that have not finished.
	PendingActivities []PendingActivity
	// PendingTimers are the run's timers that have not fired.
	PendingTimers []PendingTimer
	// StartAt is when the run's code first runs, while its start is
	// delayed (StartOptions.StartAt) and no worker has taken its first
	// task yet; zero otherwise. A StartAt in the past means the run waits
	// for a worker that polls its queue and runs its type.
	StartAt time.Time
}

// PendingActivity is an activity of a run that has not finished.
type PendingActivity struct {
	Activity string
	Queue    string
	// Attempts is how many attempts have started; MaxAttempts the budget
	// (0: unlimited).
	Attempts    int
	MaxAttempts int
	// LastError is the error of the last failed attempt, or empty.
	LastError string
	// NextAttemptAt is when the next attempt may start; while an attempt
	// runs, when its lease ends.
	NextAttemptAt time.Time
	// Running is true while an attempt runs on a worker.
	Running bool
	// Heartbeat is the details of the last heartbeat, or nil.
	Heartbeat json.RawMessage
}

// PendingTimer is a timer of a run that has not fired.
type PendingTimer struct {
	FireAt time.Time
}

// Describe returns the state of the run.
func (r *Run[Out]) Describe(ctx context.Context) (RunInfo, error) {
	return r.e.describe(ctx, r.RunID)
}

// History returns the run's events in order.
func (r *Run[Out]) History(ctx context.Context) ([]history.Event, error) {
	return r.e.store.ListEvents(ctx, r.RunID, 0)
}

// Describe returns the state of the newest run of workflowID.
func (e *Engine) Describe(ctx context.Context, workflowID string) (RunInfo, error) {
	r, err := GetRun[json.RawMessage](ctx, e, workflowID)
	if err != nil {
		return RunInfo{}, err
	}
	return e.describe(ctx, r.RunID)
}

// History returns the events of the newest run of workflowID.
func (e *Engine) History(ctx context.Context, workflowID string) ([]history.Event, error) {
	r, err := GetRun[json.RawMessage](ctx, e, workflowID)
	if err != nil {
		return nil, err
	}
	return r.History(ctx)
}

func (e *Engine) describe(ctx context.Context, runID string) (RunInfo, error) {
	r, err := e.store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return RunInfo{}, fmt.Errorf("describe run %s: %w", runID, ErrRunNotFound)
	}
	if err != nil {
		return RunInfo{}, fmt.Errorf("describe run %s: %w", runID, err)
	}
	info := RunInfo{
		WorkflowID: r.WorkflowID, RunID: r.RunID, WorkflowType: r.WorkflowType, Queue: r.Queue,
		Status: Status(r.Status), Input: r.Input, Result: r.Result, Failure: r.Failure,
		CreatedAt: r.CreatedAt, ClosedAt: r.ClosedAt, LastEventID: r.LastEventID,
		TaskError: r.TaskError, TaskAttempts: r.TaskAttempts,
	}
	if r.FirstTaskAt != nil && r.FirstTaskAt.After(r.CreatedAt) {
		info.StartAt = *r.FirstTaskAt
	}
	acts, err := e.store.ListPendingActivities(ctx, runID)
	if err != nil {
		return info, fmt.Errorf("describe run %s: %w", runID, err)
	}
	for _, a := range acts {
		info.PendingActivities = append(info.PendingActivities, PendingActivity{
			Activity: a.Activity, Queue: a.Queue, Attempts: a.Attempts, MaxAttempts: a.MaxAttempts,
			LastError: a.LastError, NextAttemptAt: a.RunAfter, Running: a.LockedBy != "", Heartbeat: a.Heartbeat,
		})
	}
	timers, err := e.store.ListPendingTimers(ctx, runID)
	if err != nil {
		return info, fmt.Errorf("describe run %s: %w", runID, err)
	}
	for _, t := range timers {
		info.PendingTimers = append(info.PendingTimers, PendingTimer{FireAt: t.FireAt})
	}
	return info, nil
}

// eagerFits reports whether ctx leaves an eager start the time its workflow
// code may take: up to Options.WorkflowDeadlockTimeout, if it does not
// yield, before the start goes the ordinary way. With less, the run's first
// task runs on a worker, and Start waits only for the insert.
func (e *Engine) eagerFits(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	deadline, ok := ctx.Deadline()
	return !ok || e.opts.WorkflowDeadlockTimeout < 0 || time.Until(deadline) > e.opts.WorkflowDeadlockTimeout
}

// reserveFirstTask reserves a workflow slot on queue for the first task of a
// run of type name that this engine starts, if Run is serving queue, the type
// is registered here and a slot is free; otherwise p is nil. Run does not
// drop its pools until done is called.
func (e *Engine) reserveFirstTask(name, queue string) (p *workers.Pool[store.WorkflowTask], done func()) {
	e.handoffMu.RLock()
	e.mu.RLock()
	registered := e.workflows[name] != nil
	e.mu.RUnlock()
	if p = e.workflowPool(queue); p == nil || !registered || !p.TryAcquire() {
		e.handoffMu.RUnlock()
		return nil, func() {}
	}
	return p, e.handoffMu.RUnlock
}

// firstTask is the claimed first workflow task of a run just created, with
// the WorkflowStarted event its insert wrote, so the worker reads nothing.
func firstTask(in store.CreateRunParams, token int64) store.WorkflowTask {
	return store.WorkflowTask{
		RunID: in.RunID, WorkflowID: in.WorkflowID, WorkflowType: in.WorkflowType, Queue: in.Queue,
		Token: token, TraceContext: in.TraceContext,
		Events: []history.Event{{ID: 1, Time: in.Now, Attributes: in.Started()}},
	}
}
