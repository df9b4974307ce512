package workflow

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
)

// activityAppError is the *ActivityError of an activity that failed with an
// *activity.ApplicationError: errors.As finds either in it.
type activityAppError struct {
	*ActivityError
	app *activity.ApplicationError
}

func (e *activityAppError) Unwrap() []error { return []error{e.ActivityError, e.app} }

// activityFailure returns the error Get returns for activity name's failure
// f: an *ActivityError, from which errors.As also extracts an
// *activity.ApplicationError if the activity failed with one.
func activityFailure(name string, f history.Failure) error {
	ae := &ActivityError{Activity: name, Message: f.Message, Class: f.Class, Attempts: f.Attempts}
	app := applicationError(f)
	if app == nil {
		return ae
	}
	return &activityAppError{ActivityError: ae, app: app}
}

// applicationError returns the *activity.ApplicationError recorded in f, or
// nil if f records another kind of error.
func applicationError(f history.Failure) *activity.ApplicationError {
	if f.Type == "" && len(f.Details) == 0 && !f.NonRetryable && f.Class != "application" {
		return nil
	}
	return &activity.ApplicationError{Message: f.Message, Type: f.Type, NonRetryable: f.NonRetryable, Details: f.Details}
}

// failureOf returns the Failure that closes a run whose code returned err.
// The type, details and retryability of an *activity.ApplicationError in
// err's chain are recorded with it, so the caller's *engine.WorkflowError
// exposes them.
func failureOf(err error) history.Failure {
	f := history.Failure{Message: history.EscapeText(err.Error()), Class: history.EscapeText(errorClass(err))}
	ae, ok := errors.AsType[*activity.ApplicationError](err)
	if !ok {
		return f
	}
	f.Type, f.NonRetryable = history.EscapeText(ae.Type), ae.NonRetryable
	if len(ae.Details) > 0 && json.Valid(ae.Details) && !bytes.Contains(ae.Details, []byte(`\u0000`)) {
		f.Details = ae.Details
	}
	return f
}
