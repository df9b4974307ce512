package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/workflow"
)

// errUnregistered marks a task whose type this worker does not have.
var errUnregistered = errors.New("not registered")

// claimWorkflowTasks claims ready tasks of the workflow types this engine
// has: a type no worker has waits, ready, and shows in the queue's
// oldest-ready age.
func (e *Engine) claimWorkflowTasks(ctx context.Context, queue string, n int) ([]store.WorkflowTask, error) {
	types := e.registered(true)
	if len(types) == 0 {
		return nil, nil
	}
	tasks, err := e.store.ClaimWorkflowTasks(ctx, store.ClaimParams{
		Queue: queue, WorkerID: e.opts.WorkerID, Limit: n, Now: e.dueNow(), Lease: e.opts.WorkflowTaskLease, Types: types,
	})
	if err == nil {
		e.prefetchHistories(ctx, tasks)
	}
	return tasks, err
}

// prefetchMaxEvents bounds the histories prefetchHistories reads: by the
// events their tasks' runs had consumed, so that a claim of long histories
// does not hold them all in memory at once.
const prefetchMaxEvents = 200

// prefetchHistories reads, in one statement, the histories of claimed tasks
// whose runs are not cached here and are short (the first task of a run
// started elsewhere, or a run that moved to this engine), so that each task
// does not read its own: one statement and round trip per claim instead of
// one per task. Like each task's own read, it reads after the claim
// committed; its events are what processWorkflowTask would have read. On
// an error each task reads its own.
func (e *Engine) prefetchHistories(ctx context.Context, tasks []store.WorkflowTask) {
	var runs []string
	for _, t := range tasks {
		if len(t.Events) == 0 && t.ProcessedEventID <= prefetchMaxEvents && !e.cache.Has(t.RunID) {
			runs = append(runs, t.RunID)
		}
	}
	if len(runs) < 2 {
		return
	}
	byRun, err := e.store.ListEventsOfRuns(ctx, runs)
	if err != nil {
		return
	}
	for i := range tasks {
		if events := byRun[tasks[i].RunID]; len(events) > 0 { // only runs without events were asked for
			tasks[i].Events = events
		}
	}
}

// processWorkflowTask runs one workflow task: it brings the run's executor up
// to date with history (from the cache, or by replay), takes the commands the
// code produced and commits them, with all their effects, in one transaction.
func (e *Engine) processWorkflowTask(ctx context.Context, t store.WorkflowTask) {
	attrs := []slog.Attr{slog.String("run_id", t.RunID), slog.String("workflow", t.WorkflowType)}
	began := time.Now()
	ctx, span := e.taskSpan(ctx, t)
	var spanErr error
	defer func() {
		endSpan(span, spanErr)
		e.metrics.taskLatency.Observe(time.Since(began).Seconds())
	}()
	e.mu.RLock()
	def := e.workflows[t.WorkflowType]
	e.mu.RUnlock()
	if def == nil {
		e.failWorkflowTask(ctx, t, attrs, fmt.Errorf("workflow type %q is %w on worker %s: register it, or run it on a queue whose workers have it", t.WorkflowType, errUnregistered, e.opts.WorkerID))
		return
	}
	for rerun := 0; ; rerun++ {
		err := e.runWorkflowTask(ctx, t, def, attrs, span)
		if !errors.Is(err, store.ErrRunMoved) {
			spanErr = err
			return
		}
		// Events reached the run while the task ran: the task runs again,
		// from history, with them, on the same claim.
		if rerun == maxTaskReruns {
			e.log.LogAttrs(ctx, slog.LevelWarn, "events keep reaching the run while its workflow task runs; the task runs again when its lease ends",
				append(attrs, slog.Int("reruns", rerun))...)
			return
		}
		t.Events = nil
	}
}

// maxTaskReruns bounds how often one claim of a workflow task runs again
// because events reached its run while it ran.
const maxTaskReruns = 8

// runWorkflowTask is processWorkflowTask's one try at task t: it brings the
// run's executor up to date with history and commits the commands the code
// produced. It returns store.ErrRunMoved, having committed nothing and
// closed the executor, if events reached the run meanwhile; other errors
// are reported here and returned for the task's span.
func (e *Engine) runWorkflowTask(ctx context.Context, t store.WorkflowTask, def *workflowDef, attrs []slog.Attr, span trace.Span) error {
	x, _ := e.cache.Take(t.RunID)
	cached := x != nil
	span.SetAttributes(attribute.Bool("durable.cache_hit", cached))
	if cached {
		e.metrics.cache.WithLabelValues("hit").Inc()
	} else {
		e.metrics.cache.WithLabelValues("miss").Inc()
		x = e.newExecutor(t, def)
	}
	// A hand-off carries the events it appended, a claim the whole history
	// of a run's first task: if they go on from where the run's executor
	// is, there is nothing else to read.
	events, err := t.Events, error(nil)
	if next := x.LastEventID() + 1; len(events) > 0 && events[0].ID <= next && next <= events[len(events)-1].ID {
		events = events[next-events[0].ID:]
	} else {
		events, err = e.readEvents(ctx, t.RunID, x.LastEventID())
	}
	before := x.LastEventID() // the history this worker had seen
	if !cached {
		before = t.ProcessedEventID
	}
	if err == nil {
		applyStart := time.Now()
		err = x.Apply(events, t.ProcessedEventID)
		if !cached {
			e.metrics.replayTime.Observe(time.Since(applyStart).Seconds())
		}
	}
	if err != nil {
		x.Close()
		if e.store.Transient(err) {
			// Not the run's fault: the task returns when its lease ends,
			// without counting as a failure.
			e.log.LogAttrs(ctx, slog.LevelWarn, "read history failed; the task returns when its lease ends",
				append(attrs, slog.String("error", err.Error()))...)
			return err
		}
		e.failWorkflowTask(ctx, t, attrs, err)
		return err
	}

	_, err = e.commitTask(ctx, t, x, x.TakeCommands(), attrs, span, before, nil) // no fused step, no next activity
	return err
}

// errNotFusable is commitTask's answer to a fused step whose commands the
// fused statements do not cover; x is left open.
var errNotFusable = errors.New("commands cannot be fused with the outcome")

// commitTask commits the commands x produced for task t, with all their
// effects, and keeps x in the cache or closes it. before is the history the
// worker had seen before the task.
//
// With fused set, t has no workflow task row: the commit also records the
// activity outcome fused.event, which x has applied (see fuse). It then
// returns errNotFusable, committing nothing, if the commands have a shape
// the fused statements do not cover, and store.ErrRunMoved, having closed
// x, if the run moved on; the caller records the outcome on its own.
func (e *Engine) commitTask(ctx context.Context, t store.WorkflowTask, x wfexec.Executor, cmds []history.Attributes,
	attrs []slog.Attr, span trace.Span, before int64, fused *fusedOutcome) (next *store.ActivityTask, err error) {
	now := e.now()
	if fused != nil {
		now = fused.event.Time
	}
	commit, err := e.commitParams(t, x.LastEventID(), cmds, now)
	commit.CloseChildren = commit.Close != nil && x.HasChildren()
	if fused == nil {
		// A decision is only as new as the history it saw: if anything
		// reached the run since (a signal, a cancel request, an outcome),
		// the commit is refused and the task runs again with it.
		commit.NextEventID = x.LastEventID() + 1
	}
	if err != nil {
		x.Close()
		if fused != nil { // the plain path replays the task and fails it
			return nil, store.ErrRunMoved
		}
		e.failWorkflowTask(ctx, t, attrs, err)
		return nil, nil
	}
	if fused != nil {
		commit.Outcome = &store.Outcome{TaskID: fused.task.ID, Attempt: fused.task.Attempt, TimerSeq: fused.timerSeq}
		commit.Events = append([]history.Attributes{fused.event.Attributes}, commit.Events...)
		if !commit.Fusable() {
			return nil, errNotFusable
		}
	}
	// x has applied the commit's first skip events: a fused step's outcome,
	// or the commands, outcome and all of a run-ahead activity
	// (runahead.go). keep is false once x may not be cached.
	skip, keep := int64(0), true
	if fused != nil {
		skip = 1
	}
	var ahead *runAhead
	if fused == nil {
		ahead = e.startRunAhead(t, commit)
	}
	var (
		handOff activityHandOff
		ready   store.Ready
		merged  bool
	)
	if ahead != nil && ahead.completedWithin(e.opts.ActivityRunAhead) {
		if m, ok := e.withOutcome(t, x, cmds, ahead); ok {
			handOff = e.handOffActivities(t.RunID, m.Activities, "", nil)
			ready, err = e.store.CommitWorkflowTask(ctx, m)
			x.ReleaseLogs(err == nil)
			if merged = !errors.Is(err, store.ErrRunMoved); merged {
				commit, skip = m, int64(len(cmds))+1
				ahead.settle(nil, err == nil)
				if err == nil {
					e.metrics.outcomes.WithLabelValues("activity", ahead.task.Activity, outcomeCompleted).Inc()
					e.metrics.runAhead.WithLabelValues(runAheadMerged).Inc()
					span.SetAttributes(attribute.Int64("durable.run_ahead.seq", ahead.task.Seq))
				}
			} else {
				// Something reached the run first: the schedule commits
				// alone, and the outcome follows it the ordinary way.
				handOff.start(nil, false)
			}
		}
		if !merged { // x has gone past the commands: the next task replays
			x.Close()
			keep = false
		}
	}
	if !merged {
		// In a fused step the slot of the activity that finished runs the
		// first new activity of its queue: a sequence of activities runs in one
		// slot, one claim each, whatever the other slots are doing.
		inlineQueue := ""
		if fused != nil {
			inlineQueue = fused.task.Queue
		}
		handOff = e.handOffActivities(t.RunID, commit.Activities, inlineQueue, ahead)
		if inlineQueue != "" && handOff.inline == 0 {
			// The slot has nothing of this run to run next. If this engine has
			// a backlog on its queue, the commit claims the queue's next task
			// for the slot: no claim transaction, no idle slot meanwhile.
			if keys, share, had := e.backlog.takeIfAny(inlineQueue, 1); had {
				c := e.activityClaim(inlineQueue, 1, e.dueNow(), e.registered(false), keys, share)
				commit.ClaimNext = &c
			}
		}
		ready, err = e.store.CommitWorkflowTask(ctx, commit)
	}
	committed := err == nil
	if fused != nil {
		x.ReleaseLogs(err == nil) // a refused step's lines are dropped
	}
	// The claimed activities start once the run is back in the cache (at
	// return): one that finishes at once then finds it there.
	defer func() {
		if next = handOff.start(ready.ActivityTasks, committed); next == nil {
			next = ready.Next // claimed for the slot even if the step was refused
		}
	}()
	if err != nil {
		x.Close()
		switch {
		case fused != nil && errors.Is(err, store.ErrRunMoved):
			return nil, err
		case fused != nil && fused.timerSeq != 0:
			// The timer is still there: the scanner fires it.
			e.log.LogAttrs(ctx, slog.LevelWarn, "record a timer's firing with the next workflow task; the timer fires the ordinary way",
				append(fused.attrs, slog.String("error", err.Error()))...)
			return nil, store.ErrRunMoved
		case fused != nil:
			e.logLostWrite(ctx, "record activity outcome with the next workflow task", fused.attrs, err)
		case errors.Is(err, store.ErrRunMoved):
			e.metrics.staleWrites.WithLabelValues("workflow_decision").Inc()
			e.log.LogAttrs(ctx, slog.LevelDebug, "events reached the run while its workflow task ran; the task runs again with them", attrs...)
			return nil, err
		case errors.Is(err, store.ErrUnstorable):
			// Retrying the same commit cannot succeed: a payload or name the
			// workflow code made. The task fails, visibly, until fixed code
			// is deployed.
			e.failWorkflowTask(ctx, t, attrs, err)
		case errors.Is(err, store.ErrLeaseLost):
			e.metrics.staleWrites.WithLabelValues("workflow_commit").Inc()
			e.log.LogAttrs(ctx, slog.LevelWarn, "workflow task lease lost; its commit was refused", attrs...)
		default:
			e.log.LogAttrs(ctx, slog.LevelWarn, "commit workflow task; it runs again when its lease ends",
				append(attrs, slog.String("error", err.Error()))...)
		}
		return nil, nil
	}
	e.announce(ready)
	e.warnLongHistory(ctx, t, attrs, before, max(x.LastEventID(), ready.FirstEventID+int64(len(commit.Events))-1))
	if c := commit.Close; c != nil {
		if c.Status == store.StatusFailed {
			e.metrics.outcomes.WithLabelValues("workflow", t.WorkflowType, outcomeFailedFinal).Inc()
			// A failed run is kept as a dead letter.
			e.metrics.outcomes.WithLabelValues("workflow", t.WorkflowType, outcomeDeadLettered).Inc()
		} else if c.Status == store.StatusCompleted {
			e.metrics.outcomes.WithLabelValues("workflow", t.WorkflowType, outcomeCompleted).Inc()
		}
		e.metrics.duration.WithLabelValues("workflow", t.WorkflowType).Observe(commit.Now.Sub(x.StartedAt()).Seconds())
		span.SetAttributes(attribute.String("durable.run.status", c.Status))
	}
	if !keep {
		return next, nil
	}
	// If the commands went right after the events the run has seen, the
	// cached run takes them as its history now, so the next task of the run
	// need not read them back. A fused commit's first event is the outcome,
	// which the run has applied already.
	if own := commit.Events[skip:]; ready.FirstEventID+skip == x.LastEventID()+1 && len(own) > 0 && commit.Close == nil {
		if !applyOwn(x, ready.FirstEventID+skip, commit.Now, own) {
			return next, nil
		}
	}
	e.keepCached(t, x, commit)
	return next, nil
}

// shortSleep is how soon a timer must fire for a run that waits only on
// timers to stay in the cache: a short sleep (a retry delay, a poll) is
// cheaper to wait out in memory than to replay, a long one holds nothing.
const shortSleep = 30 * time.Second

// keepCached puts x, the run of task t that commit has just recorded, in
// the cache, and notes the timers it started that fire within shortSleep,
// to wake it here (see wakeups). A closed run is done; a run that only
// sleeps holds nothing in memory while it waits, and is rebuilt by replay
// when it wakes, unless a timer of it fires soon (this commit's, or one
// noted before): those are closed instead.
func (e *Engine) keepCached(t store.WorkflowTask, x wfexec.Executor, commit store.CommitWorkflowTaskParams) {
	var soon []wakeup
	for _, tm := range commit.Timers {
		if tm.FireAt.Sub(commit.Now) < shortSleep {
			soon = append(soon, wakeup{runID: t.RunID, seq: tm.Seq, at: tm.FireAt})
		}
	}
	if commit.Close != nil || (x.OnlyTimers() && len(soon) == 0 && !e.wakes.pending(t.RunID)) {
		x.Close()
		return
	}
	t.Events = nil
	var wake time.Time // the earliest of the soon timers of a run that only sleeps
	if x.OnlyTimers() {
		for _, w := range soon {
			if wake.IsZero() || w.at.Before(wake) {
				wake = w.at
			}
		}
	}
	if e.cache.Put(t, x, wake) {
		e.wakes.push(soon)
	}
}

// warnLongHistory warns (log and metric) when a task took the run's history
// past Options.HistoryWarnEvents.
func (e *Engine) warnLongHistory(ctx context.Context, t store.WorkflowTask, attrs []slog.Attr, before, after int64) {
	limit := int64(e.opts.HistoryWarnEvents)
	if before >= limit || after < limit {
		return
	}
	e.metrics.largeHistories.WithLabelValues(t.WorkflowType).Inc()
	e.log.LogAttrs(ctx, slog.LevelWarn, "run history is long: replays get slow; continue as new (workflow.NewContinueAsNewError) to keep it bounded",
		append(attrs, slog.Int64("events", after), slog.Int64("limit", limit))...)
}

// failWorkflowTask gives the task back to be retried with backoff, keeping
// the error on the run for Describe. The run itself does not fail: a panic
// or non-determinism is fixed by deploying new code.
func (e *Engine) failWorkflowTask(ctx context.Context, t store.WorkflowTask, attrs []slog.Attr, cause error) {
	delay := min(time.Second<<min(t.Attempts, 6), time.Minute)
	level := slog.LevelError
	var (
		pe *workflow.PanicError
		nd *workflow.NonDeterminismError
	)
	reason := "other"
	switch {
	case errors.As(cause, &pe):
		attrs = append(attrs, slog.String("stack", pe.Stack))
		reason = "panic"
	case errors.As(cause, &nd):
		e.metrics.nondeterminism.Inc()
		reason = "nondeterminism"
	case errors.Is(cause, errUnregistered):
		reason = "unregistered"
	case errors.As(cause, new(*workflow.DeadlockError)):
		attrs = append(attrs, deadlockStack(cause))
		reason = "deadlock"
	}
	e.metrics.taskFailures.WithLabelValues(reason).Inc()
	e.log.LogAttrs(ctx, level, "workflow task failed; the run waits and the task is retried",
		append(attrs, slog.String("error", cause.Error()), slog.Int("attempt", t.Attempts+1), slog.Duration("retry_in", delay))...)
	msg := cause.Error()
	if pe != nil {
		msg += "\n" + pe.Stack
	}
	now := e.now()
	err := e.store.FailWorkflowTask(ctx, store.FailWorkflowTaskParams{RunID: t.RunID, Token: t.Token, Error: msg, RunAfter: now.Add(delay), Now: now})
	if errors.Is(err, store.ErrLeaseLost) {
		e.metrics.staleWrites.WithLabelValues("workflow_fail").Inc()
		e.log.LogAttrs(ctx, slog.LevelWarn, "workflow task lease lost; its failure was refused", attrs...)
	} else if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "record workflow task failure; the task returns when its lease ends",
			append(attrs, slog.String("error", err.Error()))...)
	}
}

// readEvents reads a run's events after afterID, retrying for a while if
// the database does not answer (a killed connection, a restart).
func (e *Engine) readEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	wait := 20 * time.Millisecond
	deadline := time.Now().Add(e.opts.WorkflowTaskLease / 2)
	for {
		events, err := e.store.ListEvents(ctx, runID, afterID)
		if !e.store.Transient(err) || time.Now().Add(wait).After(deadline) || !sleepCtx(ctx, wait) {
			return events, err
		}
		wait = min(2*wait, time.Second)
	}
}

// newActivityTask builds the task of a scheduled activity (runID empty for
// a standalone job, whose caller sets the idempotency key).
func (e *Engine) newActivityTask(runID string, a history.ActivityScheduled, now time.Time) (store.NewActivityTask, error) {
	o, err := decodeActivityOptions(a.Options)
	if err != nil {
		return store.NewActivityTask{}, fmt.Errorf("decode options of activity %s: %w", a.Activity, err)
	}
	if err := o.Validate(); err != nil {
		return store.NewActivityTask{}, fmt.Errorf("activity %s: %w", a.Activity, err)
	}
	o = o.WithDefaults()
	if len(a.Input) > e.opts.MaxPayloadBytes {
		return store.NewActivityTask{}, fmt.Errorf("input of activity %s is %d bytes, over the %d-byte limit (Options.MaxPayloadBytes): pass a reference to the data instead", a.Activity, len(a.Input), e.opts.MaxPayloadBytes)
	}
	t := store.NewActivityTask{
		Seq: a.Seq, Activity: a.Activity, Queue: o.Queue, Input: a.Input,
		MaxAttempts: o.Retry.MaximumAttempts, Options: a.Options,
		Lease: leaseOf(o), RunAfter: now,
	}
	if runID != "" {
		t.IdempotencyKey = fmt.Sprintf("%s:%d", runID, a.Seq)
	}
	return t, nil
}

// leaseOf is how long one claim of an activity holds: its heartbeat timeout
// if it heartbeats (each heartbeat extends the claim), else its
// start-to-close timeout.
func leaseOf(o activity.Options) time.Duration {
	if o.HeartbeatTimeout > 0 {
		return o.HeartbeatTimeout
	}
	return o.StartToCloseTimeout
}

// commitParams turns a task's commands into the store's commit.
func (e *Engine) commitParams(t store.WorkflowTask, processed int64, cmds []history.Attributes, now time.Time) (store.CommitWorkflowTaskParams, error) {
	p := store.CommitWorkflowTaskParams{
		RunID: t.RunID, WorkflowID: t.WorkflowID, WorkflowQueue: t.Queue, TraceContext: t.TraceContext, Token: t.Token,
		ParentRunID:      t.ParentRunID,
		ProcessedEventID: processed, Events: cmds, Now: now,
	}
	for i, c := range cmds {
		switch c := c.(type) {
		case history.ActivityScheduled:
			a, err := e.newActivityTask(t.RunID, c, now)
			if err != nil {
				return p, err
			}
			p.Activities = append(p.Activities, a)
		case history.TimerStarted:
			p.Timers = append(p.Timers, store.NewTimer{Seq: c.Seq, FireAt: c.FireAt})
		case history.TimerCanceled:
			p.CanceledTimers = append(p.CanceledTimers, c.Seq)
		case history.WorkflowCompleted:
			p.Close = &store.CloseRun{Status: store.StatusCompleted, Result: c.Result}
		case history.WorkflowFailed:
			p.Close = &store.CloseRun{Status: store.StatusFailed, Failure: &c.Failure}
		case history.ActivityCanceled:
			if c.Wait {
				p.WaitCanceledActivities = append(p.WaitCanceledActivities, c.Seq)
			} else {
				p.CanceledActivities = append(p.CanceledActivities, c.Seq)
			}
		case history.WorkflowCanceled:
			p.Close = &store.CloseRun{Status: store.StatusCanceled, Failure: &history.Failure{Message: "canceled: " + c.Reason, Class: "canceled"}}
		case history.ChildWorkflowScheduled:
			if c.RunID == "" { // set already if these commands were made params before (withOutcome)
				c.RunID = uuid.NewString()
				cmds[i] = c
			}
			p.Children = append(p.Children, store.NewChild{
				Seq: c.Seq, RunID: c.RunID, WorkflowID: c.WorkflowID, WorkflowType: c.WorkflowType,
				Queue: c.Queue, Input: c.Input, ParentClosePolicy: c.ParentClosePolicy,
			})
		case history.ExternalSignalScheduled:
			p.External = append(p.External, store.ExternalRequest{
				Seq: c.Seq, WorkflowID: c.WorkflowID, RunID: c.RunID,
				Event: history.SignalReceived{Name: c.Name, Payload: c.Payload},
			})
		case history.ExternalCancelScheduled:
			p.External = append(p.External, store.ExternalRequest{
				Seq: c.Seq, WorkflowID: c.WorkflowID, RunID: c.RunID,
				Event: history.WorkflowCancelRequested{Reason: c.Reason},
			})
		case history.WorkflowContinuedAsNew:
			// The new run's ID is chosen here and recorded in the event.
			c.NewRunID = uuid.NewString()
			cmds[i] = c
			p.Close = &store.CloseRun{Status: store.StatusContinuedAsNew}
			p.ContinueAs = &store.NewRun{RunID: c.NewRunID, Input: c.Input}
		}
	}
	// A timer started and canceled in the same task never gets a row: the
	// commit's insert and delete cannot see each other.
	if len(p.CanceledTimers) > 0 && len(p.Timers) > 0 {
		p.Timers = slices.DeleteFunc(p.Timers, func(t store.NewTimer) bool { return slices.Contains(p.CanceledTimers, t.Seq) })
	}
	return p, nil
}
