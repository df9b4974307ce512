package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/wfexec"
)

func init() {
	wfexec.New = func(o wfexec.Options) wfexec.Executor { return newExecutor(o) }
}

// executor replays one run: it feeds history events to the workflow's code
// and matches the commands the code produces against the commands history
// recorded.
type executor struct {
	opts wfexec.Options
	fn   func(Context, json.RawMessage) (json.RawMessage, error)
	d    dispatcher

	seq      int64                        // last command sequence number handed out
	pending  []*command                   // produced by code, not yet seen in history, in order
	futures  map[int64]*future            // open activity and timer futures, by seq
	recorded map[int64]json.RawMessage    // side-effect values found in history, by seq
	canceled map[int64]bool               // timers canceled by the code; a late TimerFired is ignored
	signals  map[string][]json.RawMessage // received signals not yet taken, by name
	versions map[string]int               // versions found in history, by change ID
	asked    map[string]bool              // change IDs the code has called GetVersion for
	queries  map[string]func() (json.RawMessage, error)

	cancelRequested bool
	cancelReason    string
	terminated      bool // history ends in WorkflowTerminated
	children        bool // the run started child workflows

	// batched is set for histories of format history.FormatTasks: the
	// events between two commands reach the code together (see Apply).
	batched bool
	// due is set when events were delivered that the code has not run
	// after; delivered, when events were delivered since TakeCommands.
	due, delivered bool

	now           time.Time
	current       int64 // the event being applied, for traces
	startedAt     time.Time
	replaying     bool
	lastEventID   int64
	lastEventTime time.Time // the latest event time applied
	replayedUpTo  int64
	closed        bool // a completion command was produced
	logger        *slog.Logger
	holdLogs      bool       // buffer log records (a step that may not take effect)
	heldLogs      []heldLine // what the workflow logged while held
}

// heldLine is a log record held back until its step takes effect.
type heldLine struct {
	ctx context.Context
	h   slog.Handler
	r   slog.Record
}

type command struct {
	attrs history.Attributes
	sent  bool      // handed to the engine by TakeCommands
	at    callStack // where workflow code asked for it
}

func newExecutor(o wfexec.Options) *executor {
	fn, ok := o.Func.(func(Context, json.RawMessage) (json.RawMessage, error))
	if !ok {
		panic(fmt.Sprintf("wfexec: Func has type %T", o.Func))
	}
	x := &executor{opts: o, fn: fn, futures: map[int64]*future{}, recorded: map[int64]json.RawMessage{}, canceled: map[int64]bool{},
		signals: map[string][]json.RawMessage{}, versions: map[string]int{}, asked: map[string]bool{},
		queries: map[string]func() (json.RawMessage, error){}}
	x.d.opts = &x.opts
	base := o.Logger
	if base == nil {
		base = slog.Default()
	}
	x.logger = slog.New(&replayHandler{inner: base.Handler(), x: x}).With(
		slog.String("workflow", o.WorkflowType), slog.String("workflow_id", o.WorkflowID), slog.String("run_id", o.RunID))
	return x
}

func (x *executor) LastEventID() int64 { return x.lastEventID }

func (x *executor) LastEventTime() time.Time { return x.lastEventTime }

func (x *executor) HoldLogs() { x.holdLogs = true }

func (x *executor) ReleaseLogs(emit bool) {
	held := x.heldLogs
	x.holdLogs, x.heldLogs = false, nil
	if !emit {
		return
	}
	for _, l := range held {
		_ = l.h.Handle(l.ctx, l.r) // as slog.Logger does: a handler's error has nowhere to go
	}
}

func (x *executor) StartedAt() time.Time { return x.startedAt }

func (x *executor) HasChildren() bool { return x.children }

// OnlyTimers reports whether every open future of the run is a timer (or
// there are none): the run waits for time or for a signal, and nothing is
// lost by dropping it from memory.
func (x *executor) OnlyTimers() bool {
	for _, f := range x.futures {
		if f.activity != "" || f.child != "" {
			return false
		}
	}
	return true
}

// TimerPending reports whether timer seq was started and has neither fired
// nor been canceled.
func (x *executor) TimerPending(seq int64) bool {
	f, ok := x.futures[seq]
	return ok && f.name == "timer" && !x.terminated
}

func (x *executor) Close() { x.d.close() }

func (x *executor) TakeCommands() []history.Attributes {
	if x.terminated || x.d.dead != nil {
		// The run is closed, or its code ran past the deadlock bound:
		// nothing more is recorded.
		return nil
	}
	var out []history.Attributes
	for _, c := range x.pending {
		if !c.sent {
			c.sent = true
			out = append(out, c.attrs)
		}
	}
	if len(out) == 0 && x.delivered && x.batched {
		// The task ends here: events that come later reach the code in
		// another task, and replay must not deliver them with these.
		c := &command{attrs: history.WorkflowTaskCompleted{}, sent: true}
		x.pending = append(x.pending, c)
		out = append(out, c.attrs)
	}
	x.delivered = false
	return out
}

func (x *executor) Apply(events []history.Event, replayedUpTo int64) error {
	x.replayedUpTo = replayedUpTo
	for _, ev := range events {
		switch r := ev.Attributes.(type) {
		case history.SideEffectRecorded:
			x.recorded[r.Seq] = r.Value
		case history.VersionMarker:
			// The first marker of a change is its answer. Engines before
			// 2026-12-03 recorded one at every call (see GetVersion).
			if _, ok := x.versions[r.ChangeID]; !ok {
				x.versions[r.ChangeID] = r.Version
			}
		}
	}
	for i, ev := range events {
		if ev.ID != x.lastEventID+1 {
			return fmt.Errorf("run %s: history skips from event %d to %d", x.opts.RunID, x.lastEventID, ev.ID)
		}
		if err := x.apply(ev); err != nil {
			return err
		}
		x.lastEventID = ev.ID
		if ev.Time.After(x.lastEventTime) {
			x.lastEventTime = ev.Time
		}
		// The code runs once the events that reached its task together
		// are delivered: up to the next command, or the end of what the
		// task got. Under format 0, after each event.
		if x.due && (!x.batched || i+1 == len(events) || events[i+1].Attributes.IsCommand()) {
			x.due = false
			if err := x.d.run(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (x *executor) apply(ev history.Event) error {
	if x.terminated {
		return fmt.Errorf("run %s: event %d (%s) comes after the run was terminated", x.opts.RunID, ev.ID, ev.Type())
	}
	x.replaying = ev.ID <= x.replayedUpTo
	x.current = ev.ID
	if ev.Attributes.IsCommand() {
		x.delivered = false // what came before reached a task that recorded this
		return x.match(ev)
	}
	if t := x.opts.Trace; t != nil {
		t(ev.ID, "event", describeEvent(ev.Attributes))
	}
	x.now = ev.Time
	switch a := ev.Attributes.(type) {
	case history.WorkflowStarted:
		if ev.ID != 1 {
			return x.nondeterminism(ev, "a second workflow start")
		}
		input := a.Input
		x.startedAt = ev.Time
		x.batched = a.Format >= history.FormatTasks
		x.d.spawn("main", func() { x.runMain(input) })
	case history.ActivityCompleted:
		if x.canceled[a.Seq] { // finished before the cancellation committed
			delete(x.canceled, a.Seq)
			return nil
		}
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		if f.cancelWaiting {
			f.settle(nil, ErrCanceled)
			break
		}
		f.settle(a.Result, nil)
	case history.ActivityFailed:
		if x.canceled[a.Seq] {
			delete(x.canceled, a.Seq)
			return nil
		}
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		if f.cancelWaiting {
			f.settle(nil, ErrCanceled)
			break
		}
		f.settle(nil, activityFailure(f.activity, a.Failure))
	case history.SignalReceived:
		x.signals[a.Name] = append(x.signals[a.Name], a.Payload)
	case history.WorkflowCancelRequested:
		if !x.cancelRequested {
			x.cancelRequested, x.cancelReason = true, a.Reason
			x.cancelOpenFutures()
		}
	case history.ChildWorkflowStarted:
		f, ok := x.futures[a.Seq]
		if !ok || f.started == nil {
			return &NonDeterminismError{RunID: x.opts.RunID, EventID: ev.ID, Recorded: describeEvent(a),
				Got: fmt.Sprintf("no open child workflow with seq %d", a.Seq)}
		}
		f.started.settle(mustJSON(ChildWorkflowExecution{WorkflowID: f.child, RunID: a.RunID}), nil)
	case history.ChildWorkflowCompleted:
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		if !f.started.ready { // recorded before child_workflow_started existed
			f.started.settle(mustJSON(ChildWorkflowExecution{WorkflowID: f.child}), nil)
		}
		f.settle(a.Result, nil)
	case history.ChildWorkflowFailed:
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		cerr := &ChildWorkflowError{WorkflowID: f.child, Message: a.Failure.Message, Class: a.Failure.Class}
		if !f.started.ready { // it could not start
			f.started.settle(nil, cerr)
		}
		f.settle(nil, cerr)
	case history.ExternalRequestCompleted:
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		f.settle(nil, nil)
	case history.ExternalRequestFailed:
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		f.settle(nil, &ExternalWorkflowError{WorkflowID: f.external, RunID: f.externalRun, Message: a.Failure.Message})
	case history.TimerFired:
		if x.canceled[a.Seq] {
			// Fired before the cancellation committed; the code has moved on.
			delete(x.canceled, a.Seq)
			return nil
		}
		f, err := x.future(ev, a.Seq)
		if err != nil {
			return err
		}
		f.settle(nil, nil)
	case history.WorkflowTerminated:
		// Written from outside (Engine.Terminate, a parent's close policy),
		// not by the code: the run ends here, wherever its code was. It
		// delivers nothing, so no code runs; commands the code gave that
		// history does not hold were never committed, and are not given.
		x.terminated = true
		return nil
	default:
		return fmt.Errorf("run %s: event %d: %s is not handled by this version of durable", x.opts.RunID, ev.ID, ev.Type())
	}
	x.due, x.delivered = true, true
	return nil
}

// cancelOpenFutures gives up on every open activity and timer that was not
// started on a disconnected context: each is canceled in history and its
// future fails with ErrCanceled.
func (x *executor) cancelOpenFutures() {
	seqs := make([]int64, 0, len(x.futures))
	for seq, f := range x.futures {
		if !f.detached && !f.cancelWaiting {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs) // map order is random; commands must not be
	for _, seq := range seqs {
		f := x.futures[seq]
		if f.waitCancel {
			// Its outcome, once the attempt acknowledges, settles it.
			f.cancelWaiting = true
			x.command(history.ActivityCanceled{Seq: seq, Wait: true})
			continue
		}
		delete(x.futures, seq)
		x.canceled[seq] = true
		if f.activity != "" {
			x.command(history.ActivityCanceled{Seq: seq})
		} else {
			x.command(history.TimerCanceled{Seq: seq})
		}
		f.settle(nil, ErrCanceled)
	}
}

func (x *executor) runMain(input json.RawMessage) {
	result, err := x.fn(Context{x: x}, input)
	var can *ContinueAsNewError
	switch {
	case errors.As(err, &can):
		x.command(history.WorkflowContinuedAsNew{Input: can.input})
		x.closed = true
		return
	case err != nil && x.cancelRequested && errors.Is(err, ErrCanceled):
		x.command(history.WorkflowCanceled{Reason: x.cancelReason})
		x.closed = true
		return
	}
	if err != nil {
		x.command(history.WorkflowFailed{Failure: failureOf(err)})
	} else {
		x.command(history.WorkflowCompleted{Result: result})
	}
	x.closed = true
}

// future returns the open future of the command seq, which an event resolves.
func (x *executor) future(ev history.Event, seq int64) (*future, error) {
	f, ok := x.futures[seq]
	if !ok {
		return nil, &NonDeterminismError{
			RunID: x.opts.RunID, EventID: ev.ID,
			Recorded: describe(ev.Attributes),
			Got:      fmt.Sprintf("no open activity or timer with seq %d", seq),
		}
	}
	delete(x.futures, seq)
	return f, nil
}

// match checks a command event from history against the next command the
// code produced.
func (x *executor) match(ev history.Event) error {
	if skippable(ev.Attributes, x.pending) {
		return nil
	}
	if _, ok := ev.Attributes.(history.WorkflowTaskCompleted); ok {
		// A task that made no command: the code must make none here either.
		if len(x.pending) == 0 {
			return nil
		}
		if _, own := x.pending[0].attrs.(history.WorkflowTaskCompleted); !own {
			err := x.nondeterminism(ev, describe(x.pending[0].attrs))
			err.Pos = x.pending[0].at.position()
			return err
		}
	}
	if len(x.pending) == 0 {
		return x.nondeterminism(ev, "nothing")
	}
	c := x.pending[0]
	if !sameCommand(c.attrs, ev.Attributes) {
		err := x.nondeterminism(ev, describe(c.attrs))
		err.Pos = c.at.position()
		return err
	}
	if t := x.opts.Trace; t != nil {
		at := c.at.position()
		if at != "" {
			at = " at " + at
		}
		t(ev.ID, "command", describe(c.attrs)+at)
	}
	x.pending[0] = nil
	x.pending = x.pending[1:]
	return nil
}

// mustJSON encodes a value that always encodes.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// compact returns raw JSON on one line.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// describeEvent names an event delivered to the code, for traces.
func describeEvent(a history.Attributes) string {
	switch a := a.(type) {
	case history.WorkflowStarted:
		return fmt.Sprintf("WorkflowStarted(%s) input %s", a.WorkflowType, compact(a.Input))
	case history.ActivityCompleted:
		return fmt.Sprintf("ActivityCompleted(seq %d) result %s", a.Seq, compact(a.Result))
	case history.ActivityFailed:
		return fmt.Sprintf("ActivityFailed(seq %d): %s", a.Seq, a.Failure.Message)
	case history.TimerFired:
		return fmt.Sprintf("TimerFired(seq %d)", a.Seq)
	case history.SignalReceived:
		return fmt.Sprintf("SignalReceived(%s) %s", a.Name, compact(a.Payload))
	case history.ChildWorkflowStarted:
		return fmt.Sprintf("ChildWorkflowStarted(seq %d) run %s", a.Seq, a.RunID)
	case history.ChildWorkflowCompleted:
		return fmt.Sprintf("ChildWorkflowCompleted(seq %d) result %s", a.Seq, compact(a.Result))
	case history.ChildWorkflowFailed:
		return fmt.Sprintf("ChildWorkflowFailed(seq %d): %s", a.Seq, a.Failure.Message)
	case history.WorkflowCancelRequested:
		return fmt.Sprintf("WorkflowCancelRequested: %s", a.Reason)
	case history.ExternalRequestCompleted:
		return fmt.Sprintf("ExternalRequestCompleted(seq %d)", a.Seq)
	case history.ExternalRequestFailed:
		return fmt.Sprintf("ExternalRequestFailed(seq %d): %s", a.Seq, a.Failure.Message)
	case history.WorkflowTerminated:
		return fmt.Sprintf("WorkflowTerminated: %s", a.Reason)
	}
	return a.EventType()
}

// Pending describes what the run waits for.
func (x *executor) Pending() []string {
	if x.terminated {
		return nil
	}
	seqs := make([]int64, 0, len(x.futures))
	for seq := range x.futures {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	var out []string
	for _, seq := range seqs {
		f := x.futures[seq]
		out = append(out, fmt.Sprintf("%s (seq %d)", f.name, seq))
	}
	names := make([]string, 0, len(x.signals))
	for name, q := range x.signals {
		if len(q) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, fmt.Sprintf("%d signal(s) %q not taken yet", len(x.signals[name]), name))
	}
	return out
}

// skippable reports whether a recorded command the code no longer makes may
// be passed over: a version marker of a GetVersion call that was removed.
func skippable(recorded history.Attributes, pending []*command) bool {
	m, ok := recorded.(history.VersionMarker)
	if !ok {
		return false
	}
	if len(pending) > 0 {
		if p, ok := pending[0].attrs.(history.VersionMarker); ok && p.ChangeID == m.ChangeID {
			return false
		}
	}
	return true
}

func (x *executor) nondeterminism(ev history.Event, got string) *NonDeterminismError {
	return &NonDeterminismError{RunID: x.opts.RunID, EventID: ev.ID, Recorded: describe(ev.Attributes), Got: got}
}

// command records a command produced by workflow code.
func (x *executor) command(a history.Attributes) {
	c := &command{attrs: a}
	switch a.(type) {
	case history.WorkflowCompleted, history.WorkflowFailed, history.WorkflowCanceled, history.WorkflowContinuedAsNew:
		// The workflow function returned: no call site to name.
	default:
		c.at.n = runtime.Callers(2, c.at.pcs[:]) // from command's caller on
	}
	x.pending = append(x.pending, c)
}

func (x *executor) nextSeq() int64 {
	x.seq++
	return x.seq
}

func sameCommand(got, recorded history.Attributes) bool {
	if got.EventType() != recorded.EventType() {
		return false
	}
	switch g := got.(type) {
	case history.ActivityScheduled:
		r := recorded.(history.ActivityScheduled)
		return g.Seq == r.Seq && g.Activity == r.Activity
	case history.TimerStarted:
		return g.Seq == recorded.(history.TimerStarted).Seq
	case history.TimerCanceled:
		return g.Seq == recorded.(history.TimerCanceled).Seq
	case history.SideEffectRecorded:
		return g.Seq == recorded.(history.SideEffectRecorded).Seq
	case history.ActivityCanceled:
		return g.Seq == recorded.(history.ActivityCanceled).Seq
	case history.VersionMarker:
		return g.ChangeID == recorded.(history.VersionMarker).ChangeID
	case history.ChildWorkflowScheduled:
		r := recorded.(history.ChildWorkflowScheduled)
		return g.Seq == r.Seq && g.WorkflowType == r.WorkflowType
	case history.ExternalSignalScheduled:
		r := recorded.(history.ExternalSignalScheduled)
		return g.Seq == r.Seq && g.WorkflowID == r.WorkflowID && g.Name == r.Name
	case history.ExternalCancelScheduled:
		r := recorded.(history.ExternalCancelScheduled)
		return g.Seq == r.Seq && g.WorkflowID == r.WorkflowID
	// How the run ended is compared too: a replay whose code ignored
	// recorded events may still make the same commands.
	case history.WorkflowCompleted:
		return sameJSON(g.Result, recorded.(history.WorkflowCompleted).Result)
	case history.WorkflowFailed:
		return g.Failure.Message == recorded.(history.WorkflowFailed).Failure.Message
	case history.WorkflowContinuedAsNew:
		return sameJSON(g.Input, recorded.(history.WorkflowContinuedAsNew).Input)
	}
	return true
}

// sameJSON reports whether two JSON values are equal as values: the
// database keeps payloads as jsonb, which orders keys and spaces its own
// way.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, erra := decodeJSONValue(a)
	vb, errb := decodeJSONValue(b)
	return erra == nil && errb == nil && equalJSONValues(va, vb)
}

func decodeJSONValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func equalJSONValues(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, oka := new(big.Rat).SetString(a.String())
		rb, okb := new(big.Rat).SetString(b.String())
		return oka && okb && ra.Cmp(rb) == 0
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSONValues(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalJSONValues(va, vb) {
				return false
			}
		}
		return true
	}
	return a == b
}

// describe names a command for error messages.
func describe(a history.Attributes) string {
	switch a := a.(type) {
	case history.ActivityScheduled:
		return fmt.Sprintf("ActivityScheduled(%s, seq %d)", a.Activity, a.Seq)
	case history.TimerStarted:
		return fmt.Sprintf("TimerStarted(seq %d)", a.Seq)
	case history.TimerCanceled:
		return fmt.Sprintf("TimerCanceled(seq %d)", a.Seq)
	case history.SideEffectRecorded:
		return fmt.Sprintf("SideEffect(seq %d)", a.Seq)
	case history.ActivityCanceled:
		return fmt.Sprintf("ActivityCanceled(seq %d)", a.Seq)
	case history.VersionMarker:
		return fmt.Sprintf("GetVersion(%q)", a.ChangeID)
	case history.ChildWorkflowScheduled:
		return fmt.Sprintf("ChildWorkflowScheduled(%s, seq %d)", a.WorkflowType, a.Seq)
	case history.WorkflowCompleted:
		return "WorkflowCompleted(result " + clip(compact(a.Result)) + ")"
	case history.WorkflowFailed:
		return fmt.Sprintf("WorkflowFailed(%q)", clip(a.Failure.Message))
	case history.WorkflowContinuedAsNew:
		return "WorkflowContinuedAsNew(input " + clip(compact(a.Input)) + ")"
	case history.WorkflowTaskCompleted:
		return "a workflow task that made no command"
	case history.ExternalSignalScheduled:
		return fmt.Sprintf("SignalExternalWorkflow(%s, %q, seq %d)", a.WorkflowID, a.Name, a.Seq)
	case history.ExternalCancelScheduled:
		return fmt.Sprintf("RequestCancelExternalWorkflow(%s, seq %d)", a.WorkflowID, a.Seq)
	}
	return a.EventType()
}

const pkgPrefix = "github.com/durable-go/durable/workflow."

// callStack is where workflow code asked for a command: the program
// counters of its calls, taken at once (cheap) and turned into a position
// only when an error or a trace names it. Turning them into functions and
// files for every command was 3.5% of the engine's CPU in the W1 benchmark.
type callStack struct {
	pcs [16]uintptr
	n   int
}

// position returns "file:line" of the nearest call outside this package, or
// "" if there is none.
func (s *callStack) position() string {
	if s.n == 0 {
		return ""
	}
	frames := runtime.CallersFrames(s.pcs[:s.n])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, pkgPrefix) {
			return fmt.Sprintf("%s:%d", f.File, f.Line)
		}
		if !more {
			return ""
		}
	}
}

// NonDeterminismError reports that workflow code no longer matches its run's
// history: replaying event EventID, history recorded one command and the code
// asked for another (or for none). The workflow task fails and the run waits,
// unchanged, until code that matches its history is deployed.
type NonDeterminismError struct {
	RunID   string
	EventID int64
	// Recorded is what history holds at EventID.
	Recorded string
	// Got is what the code did instead.
	Got string
	// Pos is the file:line of the workflow code that made the diverging call,
	// when there was one.
	Pos string
}

func (e *NonDeterminismError) Error() string {
	msg := fmt.Sprintf("non-determinism in run %s at event %d: history has %s, code did %s", e.RunID, e.EventID, e.Recorded, e.Got)
	if e.Pos != "" {
		msg += " at " + e.Pos
	}
	return msg + "; the run waits until code that matches its history is deployed"
}

// errorClass names an error's kind for a Failure.
func errorClass(err error) string {
	var ae *ActivityError
	if errors.As(err, &ae) {
		return "activity"
	}
	return fmt.Sprintf("%T", err)
}
