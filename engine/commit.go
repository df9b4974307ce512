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
)

// A step is one workflow task of a run: its code, brought up to date with
// the run's history, decides commands, and one transaction records them with
// all their effects. Every way of running a task goes through the same three
// stages:
//
//   - claim: a task claimed from its queue or handed to this engine by a
//     write (workflowtask.go), the run of an activity that finished or a
//     timer that fired taken from the cache (fusedstep.go), or the first
//     task of a run this engine starts (firsttask.go);
//   - apply: the run's executor replays or applies the events new to it,
//     and the code runs to its next commands;
//   - commit (this file): the commands become one store write (planCommit),
//     the write is made (writeCommit), and its outcome is settled: what it
//     made ready is announced and the run goes back to the cache, or the
//     refusal is logged and counted (settleCommit).
//
// The commit stage's options are named where they act: a fused step
// records its outcome first (step.fused); run-ahead starts the one
// activity the commands schedule before they commit, and commits its
// result with them if it comes in time (runahead.go); hand-off claims the
// new activities for this engine's free slots, and the rest go to its
// backlog (slots.go). Grouping concurrent writes into one transaction is
// the store's (store.Store.StartGroupCommit): a step does not know of it.
type step struct {
	t      store.WorkflowTask
	x      wfexec.Executor
	cmds   []history.Attributes
	attrs  []slog.Attr
	span   trace.Span
	before int64 // the last event of the history the worker had seen before the task
	// fused, if set, makes the step a fused one: t has no task row, and the
	// commit records the activity outcome or timer fire fused.event, which
	// x has applied, before the commands.
	fused *fusedOutcome
}

// errNotFusable is commitStep's answer to a fused step whose commands the
// fused statements do not cover; x is left open.
var errNotFusable = errors.New("commands cannot be fused with the outcome")

// commitStep commits the commands of step s, with all their effects, and
// keeps the run's executor in the cache or closes it. It returns the
// activity the write claimed for the calling slot, if any (a fused step's
// next activity).
//
// A fused step returns errNotFusable, committing nothing, if the commands
// have a shape the fused statements do not cover, and store.ErrRunMoved,
// having closed x, if the run moved on: the caller records the outcome on
// its own. Otherwise the only error is store.ErrRunMoved for a task whose
// run had new events: it runs again with them.
func (e *Engine) commitStep(ctx context.Context, s step) (next *store.ActivityTask, err error) {
	commit, err := e.planCommit(s)
	if err != nil {
		s.x.Close()
		if s.fused != nil { // the plain path replays the task and fails it
			return nil, store.ErrRunMoved
		}
		e.failWorkflowTask(ctx, s.t, s.attrs, err)
		return nil, nil
	}
	if s.fused != nil && !commit.Fusable() {
		return nil, errNotFusable
	}
	w := e.writeCommit(ctx, s, commit)
	// The claimed activities start once the run is back in the cache (at
	// return): one that finishes at once then finds it there.
	defer func() { next = w.startActivities() }()
	return nil, e.settleCommit(ctx, s, &w)
}

// planCommit turns the step's commands into the store's write.
func (e *Engine) planCommit(s step) (store.CommitWorkflowTaskParams, error) {
	now := e.now()
	if s.fused != nil {
		now = s.fused.event.Time
	}
	commit, err := e.commitParams(s.t, s.x.LastEventID(), s.cmds, now)
	if err != nil {
		return commit, err
	}
	commit.CloseChildren = commit.Close != nil && s.x.HasChildren()
	if f := s.fused; f != nil {
		commit.Outcome = &store.Outcome{TaskID: f.task.ID, Attempt: f.task.Attempt, TimerSeq: f.timerSeq}
		commit.Events = append([]history.Attributes{f.event.Attributes}, commit.Events...)
	} else {
		// A decision is only as new as the history it saw: if anything
		// reached the run since (a signal, a cancel request, an outcome),
		// the commit is refused and the task runs again with it.
		commit.NextEventID = s.x.LastEventID() + 1
	}
	return commit, nil
}

// written is a step's write, as writeCommit made it.
type written struct {
	commit store.CommitWorkflowTaskParams
	ready  store.Ready
	err    error
	// skip counts the commit's first events that x has applied already:
	// a fused step's outcome, or the commands and result of a run-ahead
	// activity (runahead.go).
	skip int64
	// keep is false once x may not go back to the cache.
	keep    bool
	handOff activityHandOff
}

// startActivities starts the activities the write claimed for this
// engine's slots and returns the calling slot's next activity, if any.
func (w *written) startActivities() *store.ActivityTask {
	if next := w.handOff.start(w.ready.ActivityTasks, w.err == nil); next != nil {
		return next
	}
	return w.ready.Next // claimed for the slot even if the step was refused
}

// writeCommit makes the step's write: with a run-ahead activity's result
// if one came in time, else as planned, claiming the new activities this
// engine has slots for.
func (e *Engine) writeCommit(ctx context.Context, s step, commit store.CommitWorkflowTaskParams) written {
	w := written{commit: commit, keep: true}
	var ahead *runAhead
	if s.fused != nil {
		w.skip = 1
	} else if ahead = e.startRunAhead(s.t, commit); ahead != nil && ahead.completedWithin(e.opts.ActivityRunAhead) {
		if e.writeWithResult(ctx, s, ahead, &w) {
			return w
		}
		s.x.Close() // x has gone past the commands: the next task replays
		w.keep = false
	}
	// In a fused step the slot of the activity that finished runs the first
	// new activity of its queue: a sequence of activities runs in one slot,
	// one claim each, whatever the other slots are doing.
	inlineQueue := ""
	if s.fused != nil {
		inlineQueue = s.fused.task.Queue
	}
	w.handOff = e.handOffActivities(s.t.RunID, w.commit.Activities, inlineQueue, ahead)
	if inlineQueue != "" && w.handOff.inline == 0 {
		// The slot has nothing of this run to run next. If this engine has
		// a backlog on its queue, the commit claims the queue's next task
		// for the slot: no claim transaction, no idle slot meanwhile.
		if keys, share, had := e.backlog.TakeIfAny(inlineQueue, 1); had {
			c := e.activityClaim(inlineQueue, 1, e.dueNow(), e.registered(false), keys, share)
			w.commit.ClaimNext = &c
		}
	}
	w.ready, w.err = e.store.CommitWorkflowTask(ctx, w.commit)
	if s.fused != nil {
		s.x.ReleaseLogs(w.err == nil) // a refused step's lines are dropped
	}
	return w
}

// settleCommit follows up the step's write: what it made ready is
// announced, the run's metrics taken and x kept in the cache; or the
// refusal is logged and counted and x closed. It returns the errors
// commitStep documents.
func (e *Engine) settleCommit(ctx context.Context, s step, w *written) error {
	if w.err != nil {
		s.x.Close()
		return e.commitRefused(ctx, s, w.err)
	}
	commit, ready := w.commit, w.ready
	e.announce(ready)
	e.warnLongHistory(ctx, s.t, s.attrs, s.before, max(s.x.LastEventID(), ready.FirstEventID+int64(len(commit.Events))-1))
	if c := commit.Close; c != nil {
		if c.Status == store.StatusFailed {
			e.metrics.outcomes.WithLabelValues("workflow", s.t.WorkflowType, outcomeFailedFinal).Inc()
			// A failed run is kept as a dead letter.
			e.metrics.outcomes.WithLabelValues("workflow", s.t.WorkflowType, outcomeDeadLettered).Inc()
		} else if c.Status == store.StatusCompleted {
			e.metrics.outcomes.WithLabelValues("workflow", s.t.WorkflowType, outcomeCompleted).Inc()
		}
		e.metrics.duration.WithLabelValues("workflow", s.t.WorkflowType).Observe(commit.Now.Sub(s.x.StartedAt()).Seconds())
		s.span.SetAttributes(attribute.String("durable.run.status", c.Status))
	}
	if !w.keep {
		return nil
	}
	// If the commands went right after the events the run has seen, the
	// cached run takes them as its history now, so the next task of the run
	// need not read them back. A fused commit's first event is the outcome,
	// which the run has applied already.
	if own := commit.Events[w.skip:]; ready.FirstEventID+w.skip == s.x.LastEventID()+1 && len(own) > 0 && commit.Close == nil {
		if !applyOwn(s.x, ready.FirstEventID+w.skip, commit.Now, own) {
			return nil
		}
	}
	e.keepCached(s.t, s.x, commit)
	return nil
}

// commitRefused logs and counts a step's refused write. It returns
// store.ErrRunMoved where the caller acts on it (see commitStep).
func (e *Engine) commitRefused(ctx context.Context, s step, err error) error {
	f := s.fused
	switch {
	case f != nil && errors.Is(err, store.ErrRunMoved):
		return err
	case f != nil && f.timerSeq != 0:
		// The timer is still there: the scanner fires it.
		e.log.LogAttrs(ctx, slog.LevelWarn, "record a timer's firing with the next workflow task; the timer fires the ordinary way",
			append(f.attrs, slog.String("error", err.Error()))...)
		return store.ErrRunMoved
	case f != nil:
		e.logLostWrite(ctx, "record activity outcome with the next workflow task", f.attrs, err)
	case errors.Is(err, store.ErrRunMoved):
		e.metrics.staleWrites.WithLabelValues("workflow_decision").Inc()
		e.log.LogAttrs(ctx, slog.LevelDebug, "events reached the run while its workflow task ran; the task runs again with them", s.attrs...)
		return err
	case errors.Is(err, store.ErrUnstorable):
		// Retrying the same commit cannot succeed: a payload or name the
		// workflow code made. The task fails, visibly, until fixed code
		// is deployed.
		e.failWorkflowTask(ctx, s.t, s.attrs, err)
	case errors.Is(err, store.ErrLeaseLost):
		e.metrics.staleWrites.WithLabelValues("workflow_commit").Inc()
		e.log.LogAttrs(ctx, slog.LevelWarn, "workflow task lease lost; its commit was refused", s.attrs...)
	default:
		e.log.LogAttrs(ctx, slog.LevelWarn, "commit workflow task; it runs again when its lease ends",
			append(s.attrs, slog.String("error", err.Error()))...)
	}
	return nil
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
