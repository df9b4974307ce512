package engine

import "github.com/durable-go/durable/activity"

// Unwrap returns the *activity.ApplicationError the run failed with, when
// its code returned one (or an activity's, passed on), so that errors.As
// extracts its Type and Details from the error Result returns; nil
// otherwise.
func (e *WorkflowError) Unwrap() error {
	f := e.Failure
	if f.Type == "" && len(f.Details) == 0 && !f.NonRetryable {
		return nil
	}
	return &activity.ApplicationError{Message: f.Message, Type: f.Type, NonRetryable: f.NonRetryable, Details: f.Details}
}
