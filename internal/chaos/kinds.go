package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/workflow"
)

// Kind names a workflow of the workload: what it does, how the driver
// drives it and what the checker expects of it.
type Kind string

// The kinds of workflow the rig runs.
const (
	// KindFlow is Flow: activities, a timer, an exactly-once effect and
	// signals; it completes with the result its input implies. One in a
	// few also gets a signal from an engine with the wrong payload key.
	KindFlow Kind = "flow"
	// KindDrain is Drain, started with SignalWithStart, whose closing task
	// meets the driver's signals.
	KindDrain Kind = "drain"
	// KindFail is Fail: it fails with a text PostgreSQL cannot hold as it
	// is.
	KindFail Kind = "fail"
	// KindSpin is Spin, whose code never yields: the driver terminates it.
	KindSpin Kind = "spin"
	// KindVersioned is Versioned, a loop around workflow.GetVersion.
	KindVersioned Kind = "versioned"
)

// More registered names.
const (
	drainName     = "chaos.Drain"
	failName      = "chaos.Fail"
	spinName      = "chaos.Spin"
	versionedName = "chaos.Versioned"
	work2Name     = "chaos.Work2"
	failActName   = "chaos.FailActivity"
	drainSignal   = "chaos.drain"
	upgradeSignal = "chaos.upgraded"
	// loopChange is the change ID of Versioned's GetVersion.
	loopChange = "chaos-loop"
)

// compute spends d of wall-clock time in workflow code without yielding,
// as code that computes does. A replaying workload skips it: it changes no
// command, and the checker replays thousands of histories.
func (w *workload) compute(d time.Duration) {
	if w.replay {
		return
	}
	for start := time.Now(); time.Since(start) < d; {
	}
}

// DrainInput is the input of Drain.
type DrainInput struct {
	Seq int `json:"seq"`
	// Activity puts an activity between the first signal and the drain,
	// so that the closing task is a later one than the first.
	Activity bool `json:"activity"`
	// WorkMS is how long the closing task computes before it drains: the
	// driver's signals arrive meanwhile.
	WorkMS int `json:"work_ms"`
	// Signals is how many signals the driver sends after the one that
	// SignalWithStart carries (index 0).
	Signals int `json:"signals"`
}

// DrainResult is what Drain returns.
type DrainResult struct {
	Seq int `json:"seq"`
	// FirstSeen is true when the first task found the signal that
	// SignalWithStart sent with the start.
	FirstSeen bool `json:"first_seen"`
	// Indices are the signals counted, each once, in the order taken.
	Indices []int `json:"indices"`
	Count   int   `json:"count"`
}

// Drain takes a signal (the one SignalWithStart sent: its first task must
// see it), maybe runs an activity, computes for a while inside its closing
// task and then drains its channel with ReceiveAsync and returns what it
// counted. Every signal whose Signal call returned nil before the run
// closed must be counted: a commit that closed the run over a signal its
// task did not see would lose it.
func (w *workload) Drain(ctx workflow.Context, in DrainInput) (DrainResult, error) {
	ch := workflow.GetSignalChannel[Signal](ctx, drainSignal)
	res := DrainResult{Seq: in.Seq}
	seen := map[int]bool{}
	take := func(s Signal) {
		if !seen[s.Index] {
			seen[s.Index] = true
			res.Indices = append(res.Indices, s.Index)
		}
	}
	s, ok, err := ch.ReceiveAsync()
	switch {
	case err != nil:
		return res, err
	case ok:
		res.FirstSeen = true
	default:
		if s, err = ch.Receive(ctx); err != nil {
			return res, err
		}
	}
	take(s)
	if in.Activity {
		if _, err := workflow.ExecuteActivity(ctx, w.Work, WorkInput{Seq: in.Seq, Step: 20}).Get(ctx); err != nil {
			return res, err
		}
	}
	w.compute(time.Duration(in.WorkMS) * time.Millisecond)
	for {
		s, ok, err := ch.ReceiveAsync()
		if err != nil {
			return res, err
		}
		if !ok {
			break
		}
		take(s)
	}
	res.Count = len(res.Indices)
	return res, nil
}

// The ways Fail fails.
const (
	failWorkflowError = "workflow_error" // the workflow returns the error
	failActivityError = "activity_error" // an activity returns it, permanent
	failActivityPanic = "activity_panic" // an activity panics with it, twice
)

var failModes = []string{failWorkflowError, failActivityError, failActivityPanic}

// badText is an error text PostgreSQL cannot hold as it is: a NUL byte and
// bytes that are not UTF-8. badTextEscaped is how the engine must record
// it (\x00, \xff: see docs/security.md).
const (
	badText        = "chaos: bad text \x00 with \xff\xfe in it"
	badTextEscaped = `chaos: bad text \x00 with \xff\xfe in it`
)

// FailInput is the input of Fail.
type FailInput struct {
	Seq  int    `json:"seq"`
	Mode string `json:"mode"`
}

// Fail fails with badText, by Mode: its own error (after an activity, so
// that a later task fails it), or an activity's error or panic. The run
// must end failed with the text escaped, not stay running.
func (w *workload) Fail(ctx workflow.Context, in FailInput) (int64, error) {
	if in.Mode == failWorkflowError {
		if _, err := workflow.ExecuteActivity(ctx, w.Work, WorkInput{Seq: in.Seq, Step: 30}).Get(ctx); err != nil {
			return 0, err
		}
		return 0, errors.New(badText)
	}
	return workflow.ExecuteActivity(ctx, w.FailActivity, in).Get(ctx)
}

// FailActivity fails for good with badText: a permanent error, or a panic
// (registered with two attempts).
func (w *workload) FailActivity(_ context.Context, in FailInput) (int64, error) {
	if in.Mode == failActivityPanic {
		panic(badText)
	}
	return 0, activity.Permanent(errors.New(badText))
}

// SpinInput is the input of Spin.
type SpinInput struct {
	Seq    int `json:"seq"`
	SpinMS int `json:"spin_ms"`
}

// Spin is workflow code that never yields: it computes for SpinMS, past
// the workers' deadlock timeout, before it does anything else, so every
// task of it fails with a deadlock error. What it does afterwards (an
// activity, a result) belongs to an abandoned task and must never be
// recorded; the driver terminates the run.
func (w *workload) Spin(ctx workflow.Context, in SpinInput) (int64, error) {
	w.compute(time.Duration(in.SpinMS) * time.Millisecond)
	return workflow.ExecuteActivity(ctx, w.Work, WorkInput{Seq: in.Seq, Step: 40}).Get(ctx)
}

// VersionedInput is the input of Versioned.
type VersionedInput struct {
	Seq        int `json:"seq"`
	Iterations int `json:"iterations"`
	// WaitUpgrade makes the run wait, after its first iteration, for the
	// driver's signal, which it sends once every worker runs the second
	// generation of the code: the run is upgraded mid-run.
	WaitUpgrade bool `json:"wait_upgrade"`
}

// VersionedResult is what Versioned returns: the branch each iteration
// took (workflow.DefaultVersion or 1) and the sum of the activities.
type VersionedResult struct {
	Seq      int   `json:"seq"`
	Branches []int `json:"branches"`
	Work     int64 `json:"work"`
}

// work2Extra is what Work2 adds to Work's value.
const work2Extra = 7

// Versioned loops over an activity. The first generation of the code (the
// workers before the rig's upgrade) runs Work in each iteration; the
// second asks workflow.GetVersion in every iteration and runs Work2 on the
// new branch. A run that passed an iteration on the first generation keeps
// the old branch to its end; a run the second generation started takes the
// new one throughout, with one marker.
func (w *workload) Versioned(ctx workflow.Context, in VersionedInput) (VersionedResult, error) {
	res := VersionedResult{Seq: in.Seq}
	for i := range in.Iterations {
		if in.WaitUpgrade && i == 1 {
			if _, err := workflow.GetSignalChannel[int](ctx, upgradeSignal).Receive(ctx); err != nil {
				return res, err
			}
		}
		v := workflow.DefaultVersion
		if w.gen >= 2 {
			v = workflow.GetVersion(ctx, loopChange, workflow.DefaultVersion, 1)
		}
		step := WorkInput{Seq: in.Seq, Step: 50 + i, Gen: w.gen}
		fn := w.Work
		if v == 1 {
			fn = w.Work2
		}
		x, err := workflow.ExecuteActivity(ctx, fn, step).Get(ctx)
		if err != nil {
			return res, err
		}
		res.Work += x
		res.Branches = append(res.Branches, v)
	}
	return res, nil
}

// expectedVersioned returns the result Versioned must return for in on the
// branch it took.
func expectedVersioned(in VersionedInput, branch int) VersionedResult {
	r := VersionedResult{Seq: in.Seq}
	for i := range in.Iterations {
		r.Work += workValue(WorkInput{Seq: in.Seq, Step: 50 + i})
		if branch == 1 {
			r.Work += work2Extra
		}
		r.Branches = append(r.Branches, branch)
	}
	return r
}
