package saga

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/durable-go/durable/workflow"
)

// ErrNotRun marks, in [Error.Compensations], a compensation that was not run
// because one run before it failed and [Options.ContinueOnError] was not set.
var ErrNotRun = errors.New("not run: an earlier compensation failed")

// Options configure a Saga. The zero value compensates one step at a time,
// in reverse order, and stops at the first compensation that fails.
type Options struct {
	// Parallel starts every compensation at once instead of one after another
	// in reverse order, and waits for all of them. Use it when the
	// compensations do not depend on each other. Every compensation is
	// started, so ContinueOnError makes no difference. Default false.
	Parallel bool
	// ContinueOnError runs the remaining compensations after one failed, and
	// reports every failure. By default Compensate stops at the first
	// failure, since undoing an earlier step may rely on the later step
	// having been undone; the compensations it did not run are reported with
	// ErrNotRun. Default false.
	ContinueOnError bool
}

// Saga is a stack of compensations. Add one with [AddCompensation] after
// each step that succeeded; call [Saga.Compensate] or [Saga.Fail] when a
// later step fails. A Saga belongs to one workflow run; its coroutines may
// share it, since they never run at the same time.
type Saga struct {
	opts  Options
	comps []compensation
}

// compensation is one recorded compensation: start schedules its activity
// and returns a function that waits for the outcome.
type compensation struct {
	name  string
	start func(ctx workflow.Context) func(ctx workflow.Context) error
}

// New returns an empty Saga.
func New(o Options) *Saga {
	return &Saga{opts: o}
}

// AddCompensation pushes a compensation onto s: the activity fn, to be run
// with input in if the saga compensates. Call it once the step it undoes has
// succeeded. fn must be registered with the engine like any activity, and
// should be idempotent (it runs at least once, with an idempotency key of
// its own); its result is discarded.
func AddCompensation[In, Out any](s *Saga, fn func(context.Context, In) (Out, error), in In) {
	s.comps = append(s.comps, compensation{
		name: funcName(fn),
		start: func(ctx workflow.Context) func(workflow.Context) error {
			f := workflow.ExecuteActivity(ctx, fn, in)
			return func(ctx workflow.Context) error {
				_, err := f.Get(ctx)
				return err
			}
		},
	})
}

// Compensate runs the compensations added so far as activities, most recent
// first (or all at once with [Options.Parallel]), and empties the stack. It
// returns nil when every compensation succeeded, or the failures joined with
// [errors.Join]: each is a *[workflow.ActivityError], or wraps [ErrNotRun]
// for a compensation skipped after a failure.
//
// Pass the Context whose activity options the compensations should run
// with (see [workflow.WithActivityOptions]); by default they run with the
// options their activities were registered with. Compensations are recorded
// in the run's history like any activity: if the worker stops halfway, the
// run resumes on another one, and the compensations that completed are
// replayed from history, not run again.
func (s *Saga) Compensate(ctx workflow.Context) error {
	return errors.Join(s.compensate(ctx)...)
}

// Fail compensates (see [Saga.Compensate]) and returns an *[Error] holding
// cause, the failure that made the saga give up, and the compensations that
// failed. Return it from the workflow:
//
//	if _, err := workflow.ExecuteActivity(ctx, Ship, order).Get(ctx); err != nil {
//		return Receipt{}, s.Fail(ctx, err)
//	}
func (s *Saga) Fail(ctx workflow.Context, cause error) error {
	return &Error{Cause: cause, Compensations: s.compensate(ctx)}
}

func (s *Saga) compensate(ctx workflow.Context) []error {
	comps := slices.Clone(s.comps)
	s.comps = nil
	slices.Reverse(comps)
	var errs []error
	if s.opts.Parallel {
		waits := make([]func(workflow.Context) error, len(comps))
		for i, c := range comps {
			waits[i] = c.start(ctx)
		}
		for _, wait := range waits {
			if err := wait(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errs
	}
	for i, c := range comps {
		err := c.start(ctx)(ctx)
		if err == nil {
			continue
		}
		errs = append(errs, err)
		if !s.opts.ContinueOnError {
			for j := i + 1; j < len(comps); j++ {
				errs = append(errs, fmt.Errorf("compensation %d of %d (%s): %w", j+1, len(comps), comps[j].name, ErrNotRun))
			}
			break
		}
	}
	return errs
}

// Error is what [Saga.Fail] returns: the failure that made the saga
// compensate, and the compensations that failed. [errors.Is] and
// [errors.As] see the cause and then each compensation failure through it,
// so errors.As(err, &activityErr) finds the failed step's
// *[workflow.ActivityError].
//
// When the workflow returns it, the run fails with its message; the type
// itself does not cross into the run's result.
type Error struct {
	// Cause is the failure that made the saga compensate.
	Cause error
	// Compensations are the compensations that failed, in the order they
	// ran, and those not run (wrapping [ErrNotRun]); empty when every
	// compensation succeeded.
	Compensations []error
}

func (e *Error) Error() string {
	cause := "saga failed"
	if e.Cause != nil {
		cause = e.Cause.Error()
	}
	if len(e.Compensations) == 0 {
		return cause + "; compensated"
	}
	msgs := make([]string, len(e.Compensations))
	for i, err := range e.Compensations {
		msgs[i] = err.Error()
	}
	return cause + "; compensation failed: " + strings.Join(msgs, "; ")
}

// Unwrap returns the cause followed by the compensation failures.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 1+len(e.Compensations))
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return append(errs, e.Compensations...)
}

// funcName returns the short name of fn, for messages: "Refund" for
// example.com/shop.Refund or a method value (*Shop).Refund.
func funcName(fn any) string {
	f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer())
	if f == nil {
		return "?"
	}
	name := strings.TrimSuffix(f.Name(), "-fm")
	return name[strings.LastIndexByte(name, '.')+1:]
}
