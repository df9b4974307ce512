package workflow

import (
	"encoding/json"
	"fmt"

	"github.com/durable-go/durable/history"
)

// DefaultVersion is what GetVersion returns for a run that got past the
// change before the change existed.
const DefaultVersion = -1

// GetVersion lets changed workflow code keep old runs deterministic. Put
// each change behind a change ID:
//
//	v := workflow.GetVersion(ctx, "send-sms", workflow.DefaultVersion, 1)
//	if v == workflow.DefaultVersion {
//		// the old code path, for runs that passed here before the change
//	} else {
//		// the new code path
//	}
//
// A run that reaches the call for the first time records maxSupported in its
// history and gets it back on every replay. A run whose history passed this
// point before the call existed gets DefaultVersion, and nothing is recorded.
// A recorded version outside [minSupported, maxSupported] fails the workflow
// task (the run waits for code that supports it).
//
// Only a run's first call for a change ID decides; later calls (in a loop,
// or elsewhere in the code) return the same answer and record nothing, so a
// run that passed a loop's first iterations on old code keeps
// DefaultVersion in the later ones. See docs/versioning.md.
func GetVersion(ctx Context, changeID string, minSupported, maxSupported int) int {
	x := ctx.exec()
	v, known := x.versions[changeID]
	switch {
	case x.asked[changeID]:
		// Decided by an earlier call: nothing to record.
	case known && v == DefaultVersion:
		// Recorded by engines before 2026-12-03 at a later call of a run
		// that passed the first before the change existed. The default is
		// never recorded now; match skips such a marker.
	case known:
		x.command(history.VersionMarker{ChangeID: changeID, Version: v})
	case x.replaying:
		// History passed this point before the change existed.
		v = DefaultVersion
	default:
		v = maxSupported
		x.command(history.VersionMarker{ChangeID: changeID, Version: v})
	}
	x.asked[changeID] = true
	x.versions[changeID] = v
	if v < minSupported || v > maxSupported {
		what := fmt.Sprintf("recorded version %d of change %q", v, changeID)
		if v == DefaultVersion {
			what = fmt.Sprintf("passed change %q before it existed (DefaultVersion)", changeID)
		}
		panic(fmt.Sprintf("workflow: run %s %s, but this code supports %d to %d", x.opts.RunID, what, minSupported, maxSupported))
	}
	return v
}

// ContinueAsNewError, returned by a workflow function, closes the run and
// starts a new run of the same workflow ID with new input and an empty
// history. Make one with NewContinueAsNewError.
type ContinueAsNewError struct {
	input json.RawMessage
}

func (e *ContinueAsNewError) Error() string { return "continue as new" }

// NewContinueAsNewError returns the error that continues the run as a new
// one with input in. Long-lived workflows use it to keep their histories
// bounded:
//
//	if iteration%100 == 99 {
//		return State{}, workflow.NewContinueAsNewError(ctx, state)
//	}
func NewContinueAsNewError[In any](ctx Context, in In) error {
	ctx.exec()
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("continue as new: encode input: %w", err)
	}
	return &ContinueAsNewError{input: b}
}
