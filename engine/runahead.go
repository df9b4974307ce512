package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/internal/workers"
)

// An activity that runs ahead of its schedule.
//
// A workflow task claimed from the queue, or handed off by a commit, runs
// on a history that is on disk: run again, it decides the same commands.
// When those commands schedule one activity, of a queue this engine runs
// with a free slot, and the task's claim has half its lease left (see
// startRunAhead), the activity starts at once, before the commands
// commit. If it returns a result within Options.ActivityRunAhead, the
// commands, the result and what the code did next commit together: one
// transaction where there were two (the schedule, then the outcome with the
// next step), and no activity task row. Otherwise the commands commit as
// they would have, with the activity claimed for the slot it is running in
// (store.NewActivityTask.ClaimAs), and its outcome is recorded the
// ordinary way when it returns.
//
// Nothing promised changes. Code never acts on an outcome that is not
// recorded: what it did next commits with the outcome or not at all, and
// only on the history it ran on (store.CommitWorkflowTaskParams.NextEventID:
// a signal that came meanwhile sends the outcome the ordinary way, after
// the schedule). An activity runs at least once, as always: if the
// schedule does not commit (the worker dies, or loses the task's lease),
// the attempt's outcome is dropped and the activity runs again, attempt 1
// again, when the task does. Its idempotency key is the same, so
// ExactlyOnce still applies its effects once.
//
// Not eligible: an eager start (the run is not recorded yet: its ID may be
// taken, its transaction may roll back) and a fused step (its outcome is not
// recorded yet).

// errScheduleLost cuts short an attempt whose schedule did not commit.
var errScheduleLost = errors.New("the activity ran ahead of its schedule, which did not commit")

// msgRunAheadDropped is logged when an attempt's schedule did not commit.
const msgRunAheadDropped = "activity ran ahead of its schedule, which did not commit: its outcome is dropped; it runs again with its workflow task"

// runAhead is an attempt started before its schedule committed.
type runAhead struct {
	task    store.ActivityTask // attempt 1; no ID until its schedule commits
	def     *activityDef
	opts    activity.Options
	timeout time.Duration

	// finished is closed when the attempt has returned, with out, ok and
	// err as attempt returned them.
	finished chan struct{}
	out      json.RawMessage
	ok       bool
	err      error

	// recorded is closed by settle, when the schedule's commit has
	// returned: rec is then the task it claimed for the attempt, or nil;
	// merged says that the outcome committed with the schedule.
	recorded chan struct{}
	rec      *store.ActivityTask
	merged   bool
	// dropped is done if the schedule did not commit.
	dropped context.Context
	drop    context.CancelFunc
}

// startRunAhead starts the activity commit schedules, in a free slot of
// its queue, if task t and commit may run it ahead: t holds a claim (its
// history is recorded) with half its lease left at least, commit schedules
// exactly one activity, this engine runs it, and the run stays open. It
// returns nil otherwise.
//
// A claim held past its lease may have been taken over, and the run's
// activity run by the new holder (the chaos rig caught it: a task handed
// to a worker that ran it late ran its activity again, then saw its
// commit refused). Such a task commits nothing; it must not act first.
func (e *Engine) startRunAhead(t store.WorkflowTask, commit store.CommitWorkflowTaskParams) *runAhead {
	if e.opts.ActivityRunAhead <= 0 || t.Token == 0 || len(commit.Activities) != 1 || commit.Close != nil {
		return nil
	}
	if t.LockedUntil.IsZero() || e.now().Add(e.opts.WorkflowTaskLease/2).After(t.LockedUntil) {
		return nil
	}
	a := commit.Activities[0]
	def, p := e.activityDef(a.Activity), e.activityPool(a.Queue)
	if def == nil || p == nil {
		return nil
	}
	opts, err := decodeActivityOptions(a.Options)
	if err != nil || !p.TryAcquire() { // commitParams decoded them already
		return nil
	}
	opts = opts.WithDefaults()
	r := &runAhead{
		task: store.ActivityTask{
			RunID: t.RunID, WorkflowID: t.WorkflowID, WorkflowQueue: t.Queue, TraceContext: t.TraceContext,
			Seq: a.Seq, Activity: a.Activity, Queue: a.Queue, Input: a.Input, IdempotencyKey: a.IdempotencyKey,
			Attempt: 1, MaxAttempts: a.MaxAttempts, Options: a.Options, ScheduledAt: commit.Now,
		},
		def: def, opts: opts, timeout: opts.StartToCloseTimeout,
		finished: make(chan struct{}), recorded: make(chan struct{}),
	}
	if s2c := opts.ScheduleToCloseTimeout; s2c > 0 {
		r.timeout = min(r.timeout, s2c)
	}
	r.dropped, r.drop = context.WithCancel(context.Background())
	p.Run(func(ctx context.Context, s *workers.Slot) *store.ActivityTask { return e.runAheadAttempt(ctx, r, s) })
	return r
}

// runAheadAttempt runs attempt r in slot s and, once its schedule's commit
// has returned, records its outcome unless that commit did.
func (e *Engine) runAheadAttempt(ctx context.Context, r *runAhead, s *workers.Slot) *store.ActivityTask {
	attrs := activityAttrs(r.task)
	r.out, r.ok, r.err = e.attempt(ctx, r.task, r.def, r.opts, r.timeout, attrs, r)
	close(r.finished)
	<-r.recorded
	switch {
	case r.merged:
		return nil
	case r.rec == nil:
		e.metrics.runAhead.WithLabelValues(runAheadDropped).Inc()
		e.log.LogAttrs(ctx, slog.LevelWarn, msgRunAheadDropped, append(attrs, slog.String("idempotency_key", r.task.IdempotencyKey))...)
		return nil
	case !r.ok:
		return nil // shutdown: Run gives the claim back
	}
	e.metrics.runAhead.WithLabelValues(runAheadRecorded).Inc()
	t := *r.rec
	return e.recordAttempt(ctx, t, activityAttrs(t), r.out, r.err, r.opts, s)
}

// completedWithin waits up to d for the attempt and reports whether it
// returned a result, to commit with its schedule.
func (r *runAhead) completedWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.finished:
		return r.ok && r.err == nil
	case <-t.C:
		return false
	}
}

// settle says how the schedule's commit went: it claimed rec for the
// attempt, or committed its outcome (merged), or, with neither, did not
// commit, which cuts the attempt short if it still runs.
func (r *runAhead) settle(rec *store.ActivityTask, merged bool) {
	r.rec, r.merged = rec, merged
	if rec == nil && !merged {
		r.drop()
	}
	close(r.recorded)
}

// withOutcome runs x, whose commands cmds schedule r's activity, past the
// activity's result, and returns the commit of cmds, the result and the
// commands that followed. It takes effect only on the history x had seen.
// If x cannot go on (its code fails on the result, or its commands are
// invalid), withOutcome closes x and returns false: the ordinary path
// reports it.
func (e *Engine) withOutcome(t store.WorkflowTask, x wfexec.Executor, cmds []history.Attributes, r *runAhead) (store.CommitWorkflowTaskParams, bool) {
	now := later(e.now(), x.LastEventTime()) // as the store stamps the events
	first := x.LastEventID() + 1
	if !applyOwn(x, first, now, cmds) {
		return store.CommitWorkflowTaskParams{}, false
	}
	ev := history.Event{ID: first + int64(len(cmds)), Time: now,
		Attributes: history.ActivityCompleted{Seq: r.task.Seq, Result: r.out, Attempt: r.task.Attempt}}
	x.HoldLogs() // until the commit takes effect
	if err := x.Apply([]history.Event{ev}, ev.ID-1); err != nil {
		x.Close()
		return store.CommitWorkflowTaskParams{}, false
	}
	commit, err := e.commitParams(t, ev.ID, slices.Concat(cmds, []history.Attributes{ev.Attributes}, x.TakeCommands()), now)
	if err != nil {
		x.Close()
		return store.CommitWorkflowTaskParams{}, false
	}
	commit.Activities = slices.DeleteFunc(commit.Activities, func(a store.NewActivityTask) bool { return a.Seq == r.task.Seq })
	commit.CloseChildren = commit.Close != nil && x.HasChildren()
	commit.NextEventID = first
	return commit, true
}

// writeWithResult writes step s's commands together with the result of
// the activity ahead ran and what the code did next, into w, and reports
// whether it did. If that write cannot be made (see withOutcome) or the
// run moved on first, it reports false: the commands are then written
// alone, and the result follows them the ordinary way.
func (e *Engine) writeWithResult(ctx context.Context, s step, ahead *runAhead, w *written) bool {
	m, ok := e.withOutcome(s.t, s.x, s.cmds, ahead)
	if !ok {
		return false
	}
	handOff := e.handOffActivities(s.t.RunID, m.Activities, "", nil)
	ready, err := e.store.CommitWorkflowTask(ctx, m)
	s.x.ReleaseLogs(err == nil)
	if errors.Is(err, store.ErrRunMoved) {
		handOff.start(nil, false)
		return false
	}
	ahead.settle(nil, err == nil)
	if err == nil {
		e.metrics.outcomes.WithLabelValues("activity", ahead.task.Activity, outcomeCompleted).Inc()
		e.metrics.runAhead.WithLabelValues(runAheadMerged).Inc()
		s.span.SetAttributes(attribute.Int64("durable.run_ahead.seq", ahead.task.Seq))
	}
	*w = written{commit: m, ready: ready, err: err, skip: int64(len(s.cmds)) + 1, keep: true, handOff: handOff}
	return true
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
