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
// task (the run waits for code that supports it). See docs/versioning.md.
func GetVersion(ctx Context, changeID string, minSupported, maxSupported int) int {
	x := ctx.exec()
	if v, ok := x.versions[changeID]; ok {
		if v < minSupported || v > maxSupported {
			panic(fmt.Sprintf("workflow: run %s recorded version %d of change %q, but this code supports %d to %d",
				x.opts.RunID, v, changeID, minSupported, maxSupported))
		}
		x.command(history.VersionMarker{ChangeID: changeID, Version: v})
		return v
	}
	if x.replaying {
		// History passed this point before the change existed.
		if DefaultVersion < minSupported {
			panic(fmt.Sprintf("workflow: run %s passed change %q before it existed (DefaultVersion), but this code supports %d to %d",
				x.opts.RunID, changeID, minSupported, maxSupported))
		}
		x.versions[changeID] = DefaultVersion
		return DefaultVersion
	}
	x.versions[changeID] = maxSupported
	x.command(history.VersionMarker{ChangeID: changeID, Version: maxSupported})
	return maxSupported
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
