// Package codecstore puts a payload codec between the engine and its
// store: every payload is encoded (into a codec envelope) on its way in and
// decoded on its way out.
package codecstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// Store stands between the engine and the database and passes every
// payload through Options.Codec: encoded (into a codec envelope) on its way
// in, decoded on its way out. Everything above it (the workflow cache,
// hand-offs, Result waiters, the replay tools) sees plaintext; everything
// below it, Postgres included, sees envelopes only. The store copies
// payloads from row to row (a child's input into its first event, a closing
// child's result into its parent's history, a failed job into a dead
// letter, a redriven history into a new run) as they are, so a copy stays an
// envelope that decodes anywhere: no payload is bound to the row it is in.
//
// It overrides each storage method whose parameters or results carry a
// payload (a json.RawMessage, an event, a task, a Ready); the methods it
// does not override carry none (TestCodecStorageOverridesEveryPayloadMethod
// checks this). With no codec it still reads: an envelope then fails with
// codec.ErrNoCodec instead of reaching workflow code as a zero value.
type Store struct {
	store.Store
	c   codec.PayloadCodec
	log *slog.Logger
}

// codecRetryDelay is how long an activity task that this worker could not
// decode waits before a worker may claim it again.
const codecRetryDelay = time.Minute

// New returns s with every payload passed through c. log receives the
// payloads it cannot decode.
func New(s store.Store, c codec.PayloadCodec, log *slog.Logger) store.Store {
	return Store{Store: s, c: c, log: log}
}

// InTx gives fn the transaction's store with payloads passed through the
// codec, as every other call.
func (s Store) InTx(ctx context.Context, fn func(store.Store) error) error {
	return s.Store.InTx(ctx, func(in store.Store) error { return fn(Store{Store: in, c: s.c, log: s.log}) })
}

func (s Store) encode(p json.RawMessage) (json.RawMessage, error) {
	return codec.Wrap(s.c, p)
}

func (s Store) decode(p json.RawMessage) (json.RawMessage, error) {
	return codec.Unwrap(s.c, p)
}

// field passes one payload field through f, naming it in the error.
func field(name string, p *json.RawMessage, f func(json.RawMessage) (json.RawMessage, error)) error {
	b, err := f(*p)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	*p = b
	return nil
}

// mapPayloads returns a with each payload it carries passed through f. Its
// switch lists every event type with a payload
// (TestCodecCoversEveryEventPayload checks it against package history).
func mapPayloads(a history.Attributes, f func(json.RawMessage) (json.RawMessage, error)) (history.Attributes, error) {
	var err error
	switch v := a.(type) {
	case history.WorkflowStarted:
		err = field("input", &v.Input, f)
		a = v
	case history.WorkflowCompleted:
		err = field("result", &v.Result, f)
		a = v
	case history.ActivityScheduled:
		err = field("input", &v.Input, f)
		a = v
	case history.ActivityCompleted:
		err = field("result", &v.Result, f)
		a = v
	case history.SideEffectRecorded:
		err = field("value", &v.Value, f)
		a = v
	case history.SignalReceived:
		err = field("payload", &v.Payload, f)
		a = v
	case history.WorkflowContinuedAsNew:
		err = field("input", &v.Input, f)
		a = v
	case history.ChildWorkflowScheduled:
		err = field("input", &v.Input, f)
		a = v
	case history.ChildWorkflowCompleted:
		err = field("result", &v.Result, f)
		a = v
	case history.ExternalSignalScheduled:
		err = field("payload", &v.Payload, f)
		a = v
	}
	if err != nil {
		return nil, fmt.Errorf("%s %w", a.EventType(), err)
	}
	return a, nil
}

// decodeEvents decodes the payloads of events in place.
func (s Store) decodeEvents(runID string, events []history.Event) error {
	for i := range events {
		a, err := mapPayloads(events[i].Attributes, s.decode)
		if err != nil {
			return fmt.Errorf("run %s event %d: %w", runID, events[i].ID, err)
		}
		events[i].Attributes = a
	}
	return nil
}

// DecodeHistory returns h with the payloads of its events decoded by c, for
// replaying a history exported with its payloads encoded (the CLI exports
// what is stored). Plain payloads pass unchanged; h is not modified.
func DecodeHistory(c codec.PayloadCodec, h history.History) (history.History, error) {
	s := Store{c: c}
	events := make([]history.Event, len(h.Events))
	copy(events, h.Events)
	if err := s.decodeEvents(h.RunID, events); err != nil {
		return h, err
	}
	h.Events = events
	return h, nil
}

func (s Store) decodeRun(r store.Run, err error) (store.Run, error) {
	if err != nil {
		return r, err
	}
	if err := field("input", &r.Input, s.decode); err != nil {
		return store.Run{}, fmt.Errorf("run %s %w", r.RunID, err)
	}
	if err := field("result", &r.Result, s.decode); err != nil {
		return store.Run{}, fmt.Errorf("run %s %w", r.RunID, err)
	}
	return r, nil
}

func (s Store) decodeActivityTask(t *store.ActivityTask) error {
	err := field("input", &t.Input, s.decode)
	if err == nil {
		err = field("heartbeat details", &t.Heartbeat, s.decode)
	}
	switch {
	case err == nil:
		return nil
	case t.RunID != "":
		return fmt.Errorf("run %s activity %d (%s) %w", t.RunID, t.Seq, t.Activity, err)
	default:
		return fmt.Errorf("job %d (%s) %w", t.ID, t.Activity, err)
	}
}

// decodeReady decodes what a write hands to this worker. The write has
// happened, so this never fails it: a hand-off that does not decode is
// dropped, and the normal path (reading history, claiming the task, reading
// the result) meets the error and reports it.
func (s Store) decodeReady(r store.Ready) store.Ready {
	for i := range r.WorkflowTasks {
		if err := s.decodeEvents(r.WorkflowTasks[i].RunID, r.WorkflowTasks[i].Events); err != nil {
			r.WorkflowTasks[i].Events = nil
		}
	}
	if len(r.ActivityTasks) > 0 {
		tasks := r.ActivityTasks[:0] // in place: the slice is this call's
		for _, t := range r.ActivityTasks {
			if s.decodeActivityTask(&t) == nil {
				tasks = append(tasks, t)
			}
		}
		r.ActivityTasks = tasks
	}
	if r.Next != nil {
		t := *r.Next
		if s.decodeActivityTask(&t) == nil {
			r.Next = &t
		} else {
			r.Next = nil // as a hand-off that does not decode: its lease ends
		}
	}
	if r.Closed != nil && codec.IsWrapped(r.Closed.Result) {
		c := *r.Closed
		if field("result", &c.Result, s.decode) == nil {
			r.Closed = &c
		} else {
			r.Closed = nil
		}
	}
	return r
}

// Writes.

func (s Store) CreateRun(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	plain := in.Input
	if err := field("input", &in.Input, s.encode); err != nil {
		return store.Run{}, fmt.Errorf("create run of workflow %q: %w", in.WorkflowID, err)
	}
	if in.First != nil {
		first, err := s.encodeCommit(*in.First)
		if err != nil {
			return store.Run{}, fmt.Errorf("create run of workflow %q: %w", in.WorkflowID, err)
		}
		in.First = &first
	}
	r, err := s.Store.CreateRun(ctx, in)
	if err == nil {
		r.Input = plain
		r.Ready = s.decodeReady(r.Ready)
		return r, nil
	}
	// ErrConflict comes with the open run that holds the workflow ID.
	r2, derr := s.decodeRun(r, nil)
	if derr != nil {
		return r, fmt.Errorf("%w (and %w)", err, derr)
	}
	return r2, err
}

func (s Store) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	enc, err := s.encodeCommit(in)
	if err != nil {
		return store.Ready{}, fmt.Errorf("commit workflow task of run %s: %w", in.RunID, err)
	}
	ready, err := s.Store.CommitWorkflowTask(ctx, enc)
	return s.decodeReady(ready), err
}

// encodeCommit returns a copy of in with its payloads encoded; in, which
// the engine keeps, is not changed.
func (s Store) encodeCommit(in store.CommitWorkflowTaskParams) (store.CommitWorkflowTaskParams, error) {
	if s.c == nil {
		return in, nil
	}
	events := make([]history.Attributes, len(in.Events))
	for i, a := range in.Events {
		var err error
		if events[i], err = mapPayloads(a, s.encode); err != nil {
			return in, err
		}
	}
	in.Events = events
	in.Activities = append([]store.NewActivityTask(nil), in.Activities...)
	for i := range in.Activities {
		if err := field("input of activity "+in.Activities[i].Activity, &in.Activities[i].Input, s.encode); err != nil {
			return in, err
		}
	}
	in.External = append([]store.ExternalRequest(nil), in.External...)
	for i := range in.External {
		var err error
		if in.External[i].Event, err = mapPayloads(in.External[i].Event, s.encode); err != nil {
			return in, err
		}
	}
	in.Children = append([]store.NewChild(nil), in.Children...)
	for i := range in.Children {
		if err := field("input of child workflow "+in.Children[i].WorkflowID, &in.Children[i].Input, s.encode); err != nil {
			return in, err
		}
	}
	if in.ContinueAs != nil {
		next := *in.ContinueAs
		if err := field("continue-as-new input", &next.Input, s.encode); err != nil {
			return in, err
		}
		in.ContinueAs = &next
	}
	if in.Close != nil {
		c := *in.Close
		if err := field("result", &c.Result, s.encode); err != nil {
			return in, err
		}
		in.Close = &c
	}
	return in, nil
}

// encodeEvent returns a with its payloads encoded; without a codec, a
// itself (writes need nothing then; reads still check for envelopes).
func (s Store) encodeEvent(a history.Attributes) (history.Attributes, error) {
	if s.c == nil {
		return a, nil
	}
	return mapPayloads(a, s.encode)
}

func (s Store) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	ev, err := s.encodeEvent(in.Event)
	if err != nil {
		return store.Ready{}, fmt.Errorf("resolve activity task %d: %w", in.TaskID, err)
	}
	in.Event = ev
	ready, err := s.Store.ResolveActivity(ctx, in)
	return s.decodeReady(ready), err
}

func (s Store) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	f, tasks, err := s.Store.FireTimers(ctx, in) // TimerFired carries no payload: nothing to encode
	return f, s.decodeReady(store.Ready{WorkflowTasks: tasks}).WorkflowTasks, err
}

// SignalRun refuses, writing nothing, a payload for a run that this
// engine's codec cannot decode (see checkRunDecodes).
func (s Store) SignalRun(ctx context.Context, in store.SignalParams, event history.Attributes) (store.Ready, error) {
	ev, err := s.encodeEvent(event)
	if err != nil {
		return store.Ready{}, fmt.Errorf("%s to workflow %q: %w", event.EventType(), in.WorkflowID, err)
	}
	if err := s.checkRunDecodes(ctx, in.WorkflowID, event); err != nil {
		return store.Ready{}, fmt.Errorf("%s to workflow %q: %w", event.EventType(), in.WorkflowID, err)
	}
	ready, err := s.Store.SignalRun(ctx, in, ev)
	return s.decodeReady(ready), err
}

// ErrCodecMismatch is returned by Signal, SignalTx and SignalWithStart, and
// nothing is written, when this engine's codec cannot decode what the run
// it would write to already holds: the engines that run it could not have
// decoded what it would write either (a wrong key, or a key the others do
// not have yet).
var ErrCodecMismatch = errors.New("this engine's codec cannot decode the run it would write to")

// checkRunDecodes returns an error wrapping ErrCodecMismatch if event
// carries a payload and this engine's codec cannot decode a payload that
// the open run of workflowID holds: its input, or, for a run started before
// the codec was turned on, its newest encoded payload. A run that holds no
// encoded payload, a missing or closed run (SignalRun reports those), an
// event without a payload (a cancel request) and an engine without a codec
// (its payloads are plain, which every engine reads) pass.
//
// Only the payload writes that can come from an engine that never read the
// run need this: workers write into a run after decoding its history.
func (s Store) checkRunDecodes(ctx context.Context, workflowID string, event history.Attributes) error {
	if s.c == nil {
		return nil
	}
	carries := false
	if _, err := mapPayloads(event, func(p json.RawMessage) (json.RawMessage, error) {
		carries = carries || len(p) > 0
		return p, nil
	}); err != nil || !carries {
		return err
	}
	r, err := s.Store.GetRunByWorkflowID(ctx, workflowID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case r.ClosedAt != nil:
		return nil
	}
	derr := field("input", &r.Input, s.decode)
	if derr == nil && !codec.IsWrapped(r.Input) {
		if derr, err = s.newestPayloadDecodes(ctx, r.RunID); err != nil {
			return err
		}
	}
	if derr != nil {
		return fmt.Errorf("%w: run %s %w; nothing was written: give this engine the run's key in engine.Options.Codec "+
			"(in a key rotation, every engine first gets the new key as an old key: see docs/encryption.md)", ErrCodecMismatch, r.RunID, derr)
	}
	return nil
}

// newestPayloadDecodes returns the error of decoding the newest encoded
// payload of the run's history, nil if it decodes or there is none; err is
// the error of reading the history.
func (s Store) newestPayloadDecodes(ctx context.Context, runID string) (derr, err error) {
	events, err := s.Store.ListEvents(ctx, runID, 0)
	if err != nil {
		return nil, err
	}
	for i := len(events) - 1; i >= 0; i-- {
		encoded := false
		_, derr := mapPayloads(events[i].Attributes, func(p json.RawMessage) (json.RawMessage, error) {
			if !codec.IsWrapped(p) {
				return p, nil
			}
			encoded = true
			return s.decode(p)
		})
		if derr != nil {
			return fmt.Errorf("event %d: %w", events[i].ID, derr), nil
		}
		if encoded {
			return nil, nil
		}
	}
	return nil, nil
}

func (s Store) HeartbeatActivity(ctx context.Context, in store.HeartbeatParams) error {
	if err := field("details", &in.Details, s.encode); err != nil {
		return fmt.Errorf("heartbeat of activity task %d: %w", in.TaskID, err)
	}
	return s.Store.HeartbeatActivity(ctx, in)
}

func (s Store) EnqueueJob(ctx context.Context, in store.EnqueueJobParams) (int64, bool, error) {
	if err := field("input", &in.Task.Input, s.encode); err != nil {
		return 0, false, fmt.Errorf("enqueue job %s: %w", in.Task.Activity, err)
	}
	return s.Store.EnqueueJob(ctx, in)
}

// RedriveDeadLetter gives in.Task the failed activity's input decoded, so
// that the engine checks the payload's size rather than its envelope's, and
// queues the input again as it was stored: redriving needs no plaintext.
// An engine that cannot decode it (the durable CLI has no codec) redrives
// all the same, and the workers decode it.
func (s Store) RedriveDeadLetter(ctx context.Context, in store.RedriveParams) (store.RedriveResult, error) {
	task := in.Task
	in.Task = func(runID string, a history.ActivityScheduled) (store.NewActivityTask, error) {
		stored := a.Input
		if p, err := s.decode(stored); err == nil {
			a.Input = p
		}
		t, err := task(runID, a)
		t.Input = stored // the task's input is the activity's
		return t, err
	}
	res, err := s.Store.RedriveDeadLetter(ctx, in)
	res.Ready = s.decodeReady(res.Ready)
	return res, err
}

// Reads.

func (s Store) GetRun(ctx context.Context, runID string) (store.Run, error) {
	return s.decodeRun(s.Store.GetRun(ctx, runID))
}

func (s Store) GetRunByWorkflowID(ctx context.Context, workflowID string) (store.Run, error) {
	return s.decodeRun(s.Store.GetRunByWorkflowID(ctx, workflowID))
}

func (s Store) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	events, err := s.Store.ListEvents(ctx, runID, afterID)
	if err != nil {
		return events, err
	}
	if err := s.decodeEvents(runID, events); err != nil {
		return nil, err
	}
	return events, nil
}

// ListEventsOfRuns leaves out the runs whose events do not decode: their
// tasks read their own history and meet the error there.
func (s Store) ListEventsOfRuns(ctx context.Context, runIDs []string) (map[string][]history.Event, error) {
	byRun, err := s.Store.ListEventsOfRuns(ctx, runIDs)
	for runID, events := range byRun {
		if s.decodeEvents(runID, events) != nil {
			delete(byRun, runID)
		}
	}
	return byRun, err
}

// ClaimWorkflowTasks drops the events of a task that do not decode: the
// worker then reads the run's history, meets the error there and fails the
// task with it, for all to see, until a worker with the right codec runs it.
func (s Store) ClaimWorkflowTasks(ctx context.Context, in store.ClaimParams) ([]store.WorkflowTask, error) {
	tasks, err := s.Store.ClaimWorkflowTasks(ctx, in)
	for i := range tasks {
		if s.decodeEvents(tasks[i].RunID, tasks[i].Events) != nil {
			tasks[i].Events = nil
		}
	}
	return tasks, err
}

// ClaimActivityTasks gives a task whose payloads this worker cannot decode
// back at once, with the error, without spending an attempt (as a
// rate-limited retry does): a worker with the right codec runs it.
// UnstartedActivities decodes the tasks' payloads. The engine only fails
// these tasks, so one that does not decode is returned as it is: its
// failure needs none of its payloads.
func (s Store) UnstartedActivities(ctx context.Context, now time.Time, limit int) ([]store.ActivityTask, error) {
	tasks, err := s.Store.UnstartedActivities(ctx, now, limit)
	for i := range tasks {
		t := tasks[i]
		if s.decodeActivityTask(&t) == nil {
			tasks[i] = t
		}
	}
	return tasks, err
}

func (s Store) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	tasks, err := s.Store.ClaimActivityTasks(ctx, in)
	if err != nil {
		return tasks, err
	}
	out := tasks[:0]
	for _, t := range tasks {
		derr := s.decodeActivityTask(&t)
		if derr == nil {
			out = append(out, t)
			continue
		}
		attrs := []slog.Attr{slog.String("activity", t.Activity), slog.Int64("task_id", t.ID), slog.String("error", derr.Error())}
		retry := store.RetryActivityParams{
			TaskID: t.ID, Attempt: t.Attempt, RunAfter: in.Now.Add(codecRetryDelay), Now: in.Now,
			Error: derr.Error(), ErrorClass: "codec", RateLimited: true,
		}
		if rerr := s.Store.RetryActivity(ctx, retry); rerr != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "activity payload does not decode on this worker; the task waits for its lease to end",
				append(attrs, slog.String("release_error", rerr.Error()))...)
			continue
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "activity payload does not decode on this worker (check Options.Codec); the task is given back",
			append(attrs, slog.Time("retry_at", retry.RunAfter))...)
	}
	return out, nil
}

func (s Store) TerminateRun(ctx context.Context, in store.TerminateParams) (store.Ready, error) {
	ready, err := s.Store.TerminateRun(ctx, in)
	return s.decodeReady(ready), err
}

func (s Store) ListDeadLetters(ctx context.Context, f store.DeadLetterFilter) ([]store.DeadLetter, error) {
	ds, err := s.Store.ListDeadLetters(ctx, f)
	if err != nil {
		return ds, err
	}
	for i := range ds {
		if err := field("payload", &ds[i].Payload, s.decode); err != nil {
			return nil, fmt.Errorf("dead letter %d %w", ds[i].ID, err)
		}
	}
	return ds, nil
}

func (s Store) GetDeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	d, err := s.Store.GetDeadLetter(ctx, id)
	if err != nil {
		return d, err
	}
	if err := field("payload", &d.Payload, s.decode); err != nil {
		return store.DeadLetter{}, fmt.Errorf("dead letter %d %w", id, err)
	}
	return d, nil
}

func (s Store) ListPendingActivities(ctx context.Context, runID string) ([]store.PendingActivity, error) {
	acts, err := s.Store.ListPendingActivities(ctx, runID)
	if err != nil {
		return acts, err
	}
	for i := range acts {
		a := &acts[i]
		if err := field("input", &a.Input, s.decode); err != nil {
			return nil, fmt.Errorf("run %s activity %d (%s) %w", runID, a.Seq, a.Activity, err)
		}
		if err := field("heartbeat details", &a.Heartbeat, s.decode); err != nil {
			return nil, fmt.Errorf("run %s activity %d (%s) %w", runID, a.Seq, a.Activity, err)
		}
	}
	return acts, nil
}

// Notify sends notes as they are: a close note carries its run's outcome
// only when there is no codec (Engine.closeNote).
func (s Store) Notify(ctx context.Context, notes []store.Note) error {
	return s.Store.Notify(ctx, notes)
}

// Listen delivers notes as they come: a close note whose outcome is in an
// envelope (from an engine with a codec) is not used; its run is read
// (hub.dispatch).
func (s Store) Listen(ctx context.Context, onListen func(), deliver func(store.Note)) error {
	return s.Store.Listen(ctx, onListen, deliver)
}

var _ store.Store = Store{}
