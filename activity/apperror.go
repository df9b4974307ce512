package activity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// classApplication is the error class of an [ApplicationError] without a
// Type.
const classApplication = "application"

// ApplicationError is an error with a type name and details that an
// activity or a workflow returns for the code above it to act on: the
// workflow that scheduled the activity, and the caller waiting for the
// workflow's result. Make one with [NewApplicationError] or
// [NewNonRetryableApplicationError].
//
// Its Type is its error class (see [ErrorClass]), so
// [RetryPolicy.NonRetryableErrorTypes] can name it. When the activity fails
// for good, Message, Type, Details and NonRetryable are recorded in the
// failure; the workflow's Get then returns an error from which errors.As
// extracts an *ApplicationError equal to the one returned (and a
// *workflow.ActivityError, with the activity's name and attempts).
type ApplicationError struct {
	// Message is the error's text, what Error returns.
	Message string
	// Type names the kind of failure, such as "CardDeclined". It is the
	// error's class; empty means the class "application".
	Type string
	// NonRetryable fails the activity at once, whatever its RetryPolicy.
	NonRetryable bool
	// Details is the JSON encoding of the details given to the constructor,
	// or nil. Read it with [ApplicationError.DetailsAs].
	Details json.RawMessage
}

func (e *ApplicationError) Error() string { return e.Message }

// DetailsAs decodes the error's details into v, a pointer, as
// [encoding/json.Unmarshal] does. It returns an error if there are no
// details or they do not decode into v.
func (e *ApplicationError) DetailsAs(v any) error {
	if len(e.Details) == 0 {
		return fmt.Errorf("application error %q has no details", e.Type)
	}
	if err := json.Unmarshal(e.Details, v); err != nil {
		return fmt.Errorf("decode details of application error %q: %w", e.Type, err)
	}
	return nil
}

// NewApplicationError returns an *[ApplicationError] with message msg, type
// errType and details encoded as JSON (nil for none). It is retried as its
// [RetryPolicy] says, unless errType is in
// [RetryPolicy.NonRetryableErrorTypes].
//
// Details must encode as JSON that PostgreSQL's jsonb can hold: if they do
// not (an encoding error, or a string holding a NUL character), the error
// has no details and its message says why.
func NewApplicationError(msg, errType string, details any) error {
	e := &ApplicationError{Message: msg, Type: errType}
	if details == nil {
		return e
	}
	b, err := json.Marshal(details)
	switch {
	case err != nil:
		e.Message += fmt.Sprintf(" (details dropped: encode: %v)", err)
	case bytes.Contains(b, []byte(`\u0000`)):
		e.Message += " (details dropped: they hold a NUL character, which PostgreSQL jsonb cannot store)"
	default:
		e.Details = b
	}
	return e
}

// NewNonRetryableApplicationError is [NewApplicationError] for an error
// that no retry can fix: an activity that returns it fails at once,
// whatever its [RetryPolicy].
func NewNonRetryableApplicationError(msg, errType string, details any) error {
	e := NewApplicationError(msg, errType, details).(*ApplicationError)
	e.NonRetryable = true
	return e
}

// IsNonRetryable reports whether no retry may follow err: it or an error in
// its chain was made by [Permanent], or is an [ApplicationError] with
// NonRetryable set.
func IsNonRetryable(err error) bool {
	if IsPermanent(err) {
		return true
	}
	e, ok := errors.AsType[*ApplicationError](err)
	return ok && e.NonRetryable
}
