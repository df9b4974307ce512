package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// FirstLook takes a "hello" signal without waiting: the first thing it does.
func FirstLook(ctx workflow.Context, _ int) (string, error) {
	v, ok, err := workflow.GetSignalChannel[string](ctx, "hello").ReceiveAsync()
	if err != nil || !ok {
		return "nothing", err
	}
	return v, nil
}

// TestSignalWithStartReachesTheFirstTask checks that a signal recorded with
// the start is in its channel when the code first looks, whether the
// engine that sends it runs the workflow or has never registered it, and
// that the history replays.
func TestSignalWithStartReachesTheFirstTask(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		separate bool // the sender is another engine, which does not register or run the workflow
	}{
		{name: "the sender runs it"},
		{name: "another engine sends", separate: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			worker := newEngine(t, pool, engine.Options{})
			require.NoError(t, engine.RegisterWorkflow(worker, FirstLook, engine.WorkflowOptions{}))
			run(t, worker)
			sender := worker
			if tt.separate {
				sender = newEngine(t, pool, engine.Options{})
			}
			ctx := resultCtx(t)
			_, err := engine.SignalWithStart(ctx, sender, FirstLook, 0, engine.StartOptions{ID: "first-look"}, "hello", "world")
			require.NoError(t, err)
			r, err := engine.GetRun[string](ctx, worker, "first-look")
			require.NoError(t, err)
			got, err := r.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "world", got, "the signal recorded with the start reaches the first task")
			h, err := worker.ExportHistory(ctx, "first-look")
			require.NoError(t, err)
			require.NoError(t, worker.Replay(ctx, h))
		})
	}
}

// holds makes SumSignals wait, inside its workflow task, until the test
// lets it go on: the first time for each workflow ID only.
var holds sync.Map // workflow ID -> *hold

type hold struct {
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

// awaitHold waits until the workflow of id is held; what says what it did.
func awaitHold(ctx context.Context, t *testing.T, id, what string) *hold {
	t.Helper()
	h := holdFor(id)
	select {
	case <-h.reached:
	case <-ctx.Done():
		t.Fatal(what)
	}
	return h
}

func holdFor(id string) *hold {
	h, _ := holds.LoadOrStore(id, &hold{reached: make(chan struct{}), release: make(chan struct{})})
	return h.(*hold)
}

// SumSignals waits for one "n" signal, works (held by the test) inside the
// same workflow task, then drains the channel without waiting and returns
// the sum: every signal accepted before it closed must count.
func SumSignals(ctx workflow.Context, _ int) (int, error) {
	ch := workflow.GetSignalChannel[int](ctx, "n")
	sum, err := ch.Receive(ctx)
	if err != nil {
		return 0, err
	}
	h := holdFor(workflow.GetInfo(ctx).WorkflowID)
	h.once.Do(func() {
		close(h.reached)
		<-h.release
	})
	for {
		v, ok, err := ch.ReceiveAsync()
		if err != nil {
			return 0, err
		}
		if !ok {
			return sum, nil
		}
		sum += v
	}
}

// TestSignalDuringTheClosingTaskIsProcessed checks Temporal's "unhandled
// command" rule: a task whose decision was made on an older history does
// not close the run when a signal arrived meanwhile; it runs again with
// the signal.
func TestSignalDuringTheClosingTaskIsProcessed(t *testing.T) {
	t.Parallel()
	te := testEngine{pool: pgtest.Pool(t)}
	te.e = newEngine(t, te.pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(te.e, SumSignals, engine.WorkflowOptions{}))
	run(t, te.e)
	ctx := resultCtx(t)
	id := fmt.Sprintf("sum-%p", t)
	r, err := engine.Start(ctx, te.e, SumSignals, 0, engine.StartOptions{ID: id})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, te.e, id, "n", 1))
	h := awaitHold(ctx, t, id, "the workflow did not take the first signal")
	require.NoError(t, engine.Signal(ctx, te.e, id, "n", 10), "accepted while the task that closes the run works")
	close(h.release)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 11, got, "the signal accepted before the run closed is processed")

	events, err := r.History(ctx)
	require.NoError(t, err)
	h2, err := te.e.ExportHistory(ctx, id)
	require.NoError(t, err)
	require.NoError(t, te.e.Replay(ctx, h2))
	last := events[len(events)-1]
	require.Equal(t, history.WorkflowCompleted{Result: []byte("11")}, last.Attributes)
}

// CancelAware waits for a "go" signal, works (held by the test) inside the
// same task, then reports whether a cancellation had been requested.
func CancelAware(ctx workflow.Context, _ int) (string, error) {
	if _, err := workflow.GetSignalChannel[int](ctx, "go").Receive(ctx); err != nil {
		return "", err
	}
	h := holdFor(workflow.GetInfo(ctx).WorkflowID)
	h.once.Do(func() {
		close(h.reached)
		<-h.release
	})
	if workflow.IsCanceled(ctx) {
		return "", workflow.ErrCanceled
	}
	return "finished", nil
}

// TestCancelDuringTheClosingTaskIsProcessed is the same rule for a cancel
// request: the run ends canceled, not completed over the request.
func TestCancelDuringTheClosingTaskIsProcessed(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, CancelAware, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)
	id := fmt.Sprintf("cancel-%p", t)
	r, err := engine.Start(ctx, e, CancelAware, 0, engine.StartOptions{ID: id})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, e, id, "go", 1))
	h := awaitHold(ctx, t, id, "the workflow did not take the signal")
	require.NoError(t, e.Cancel(ctx, id, "stop"))
	close(h.release)
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we, "the cancel request accepted before the run closed is processed")
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusCanceled, info.Status, "the cancel request accepted before the run closed is processed")
}

// Peek takes one "x" signal, then looks for a second without waiting: it
// answers whether the two reached it in one workflow task.
func Peek(ctx workflow.Context, _ int) (string, error) {
	ch := workflow.GetSignalChannel[string](ctx, "x")
	if _, err := ch.Receive(ctx); err != nil {
		return "", err
	}
	if _, ok, _ := ch.ReceiveAsync(); ok {
		return "together", nil
	}
	if _, err := ch.Receive(ctx); err != nil {
		return "", err
	}
	return "apart", nil
}

// TestTaskWithoutCommandsIsMarked checks that a workflow task that made no
// command records where it ended, so that replay does not deliver the
// events of two tasks as one and decide otherwise than the run did.
func TestTaskWithoutCommandsIsMarked(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, Peek, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, Peek, 0, engine.StartOptions{ID: "peek"})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, e, "peek", "x", "a"))
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		require.NoError(t, err)
		return events[len(events)-1].Type() == "workflow_task_completed" && countEvents(t, events, "signal_received") == 1
	}, 10*time.Second, 5*time.Millisecond, "the task that took the first signal ends with a marker")
	require.NoError(t, engine.Signal(ctx, e, "peek", "x", "b"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "apart", got)
	events, err := r.History(ctx)
	require.NoError(t, err)
	types := eventTypes(events)
	require.Equal(t, []string{"signal_received", "workflow_task_completed", "signal_received", "workflow_completed"},
		types[len(types)-4:], "the task that took the first signal made no command and is marked")
	require.NoError(t, e.ReplayRun(ctx, "peek"), "replay delivers each task's events apart, as the run did")

	// Without the markers, replay would take both signals in one task and
	// return another result than the run recorded: it is reported.
	h, err := e.ExportHistory(ctx, "peek")
	require.NoError(t, err)
	var kept []history.Event
	for _, ev := range h.Events {
		if ev.Type() != "workflow_task_completed" {
			ev.ID = int64(len(kept) + 1)
			kept = append(kept, ev)
		}
	}
	h.Events = kept
	var nd *workflow.NonDeterminismError
	require.ErrorAs(t, e.Replay(ctx, h), &nd, "replay compares the result with the recorded one")
	require.Contains(t, nd.Error(), `"apart"`)
}

// Step and StepV2 are the activity of VersionedLoop before and after a
// change.
func Step(_ context.Context, i int) (int, error)   { return i, nil }
func StepV2(_ context.Context, i int) (int, error) { return 100 * i, nil }

// loopV1 runs Step three times, waiting for a "next" signal after each.
func loopV1(ctx workflow.Context, _ int) (int, error) {
	sum := 0
	for i := 1; i <= 3; i++ {
		v, err := workflow.ExecuteActivity(ctx, Step, i).Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += v
		if _, err := workflow.GetSignalChannel[int](ctx, "next").Receive(ctx); err != nil {
			return 0, err
		}
	}
	return sum, nil
}

// loopV2 is loopV1 with its activity changed behind GetVersion, in the loop.
func loopV2(ctx workflow.Context, _ int) (int, error) {
	sum := 0
	for i := 1; i <= 3; i++ {
		step := Step
		if workflow.GetVersion(ctx, "step-v2", workflow.DefaultVersion, 1) == 1 {
			step = StepV2
		}
		v, err := workflow.ExecuteActivity(ctx, step, i).Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += v
		if _, err := workflow.GetSignalChannel[int](ctx, "next").Receive(ctx); err != nil {
			return 0, err
		}
	}
	return sum, nil
}

// TestGetVersionInALoopUpgradedMidRun runs a loop's first iteration on old
// code and the rest on code that calls GetVersion in the loop: the run
// keeps the old path to its end, records no marker, and replays; a new
// run takes the new path with one marker.
func TestGetVersionInALoopUpgradedMidRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	old := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(old, loopV1, engine.WorkflowOptions{Name: "VersionedLoop"}))
	require.NoError(t, engine.RegisterActivity(old, Step, activity.Options{}))
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- old.Run(runCtx) }()
	r, err := engine.Start(ctx, old, loopV1, 0, engine.StartOptions{ID: "vloop"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		require.NoError(t, err)
		return countEvents(t, events, "activity_completed") == 1
	}, 10*time.Second, 5*time.Millisecond, "the first iteration runs on the old code")
	stop()
	require.NoError(t, <-stopped)

	upgraded := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(upgraded, loopV2, engine.WorkflowOptions{Name: "VersionedLoop"}))
	require.NoError(t, engine.RegisterActivity(upgraded, Step, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(upgraded, StepV2, activity.Options{}))
	run(t, upgraded)
	for range 3 {
		require.NoError(t, engine.Signal(ctx, upgraded, "vloop", "next", 0))
	}
	r2, err := engine.GetRun[int](ctx, upgraded, "vloop")
	require.NoError(t, err)
	got, err := r2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1+2+3, got, "a run that passed the change before it existed keeps the old path")
	events, err := r2.History(ctx)
	require.NoError(t, err)
	require.Zero(t, countEvents(t, events, "version_marker"), "DefaultVersion is remembered, not recorded")
	require.NoError(t, upgraded.ReplayRun(ctx, "vloop"))

	// Engines before the fix recorded DefaultVersion at each later call:
	// such a history replays too.
	h, err := upgraded.ExportHistory(ctx, "vloop")
	require.NoError(t, err)
	var withMarkers []history.Event
	scheduled := 0
	for _, ev := range h.Events {
		if ev.Type() == "activity_scheduled" {
			if scheduled++; scheduled > 1 {
				withMarkers = append(withMarkers, history.Event{Time: ev.Time,
					Attributes: history.VersionMarker{ChangeID: "step-v2", Version: workflow.DefaultVersion}})
			}
		}
		withMarkers = append(withMarkers, ev)
	}
	for i := range withMarkers {
		withMarkers[i].ID = int64(i + 1)
	}
	h.Events = withMarkers
	require.NoError(t, upgraded.Replay(ctx, h), "a history with DefaultVersion markers replays")

	fresh, err := engine.Start(ctx, upgraded, loopV2, 0, engine.StartOptions{ID: "vloop-new"})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, engine.Signal(ctx, upgraded, "vloop-new", "next", 0))
	}
	got, err = fresh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 100+200+300, got)
	events, err = fresh.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, events, "version_marker"), "only the first call records")
	require.NoError(t, upgraded.ReplayRun(ctx, "vloop-new"))
}

// FailsWithNUL fails with a text the database cannot hold as it is.
func FailsWithNUL(_ workflow.Context, _ int) (int, error) {
	return 0, errors.New("bad \x00 byte \xff")
}

// EchoText returns its input.
func EchoText(_ context.Context, s string) (string, error) { return s, nil }

// SchedulesNUL passes an activity an input the database cannot hold.
func SchedulesNUL(ctx workflow.Context, _ int) (string, error) {
	return workflow.ExecuteActivity(ctx, EchoText, "a\x00b").Get(ctx)
}

// TestUnstorableTextsReplayAndFailVisibly checks that a run failed with an
// escaped message replays (the code's failure is compared escaped), and
// that a commit the database refuses for what the code made fails the
// workflow task visibly rather than waiting for the lease again and again.
func TestUnstorableTextsReplayAndFailVisibly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, FailsWithNUL, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, SchedulesNUL, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, EchoText, activity.Options{}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, FailsWithNUL, 0, engine.StartOptions{ID: "fails-nul"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.ErrorContains(t, err, `bad \x00 byte \xff`)
	require.NoError(t, e.ReplayRun(ctx, "fails-nul"), "the failure is compared as it was recorded")

	_, err = engine.Start(ctx, e, SchedulesNUL, 0, engine.StartOptions{ID: "schedules-nul"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := e.Describe(ctx, "schedules-nul")
		require.NoError(t, err)
		return info.TaskAttempts > 0 && strings.Contains(info.TaskError, "cannot store")
	}, 10*time.Second, 5*time.Millisecond, "the refused commit fails the workflow task, visibly")
}
