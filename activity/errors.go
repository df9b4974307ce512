package activity

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// ErrCanceled is the cause an activity's context is canceled with, and the
// error [RecordHeartbeat] wraps, when the activity's workflow no longer
// wants its outcome: the workflow canceled it (its run was canceled, or it
// gave up on it), or the run closed. The attempt should stop and return;
// its outcome is not recorded. Test for it with errors.Is.
var ErrCanceled = errors.New("activity canceled: its workflow canceled it or closed")

// ErrResultPending, returned by an activity, says that its result comes
// later, from anywhere: the engine records nothing, and the attempt waits,
// its claim handed off from the worker, until a process completes or fails
// it with [Info.TaskToken] (engine.CompleteActivity, engine.FailActivity)
// or by workflow ID and [Info.Seq] (engine.CompleteActivityByID). The
// attempt's lease still runs: it ends after StartToCloseTimeout from the
// attempt's start, or, with a HeartbeatTimeout, after that long without a
// heartbeat by token (engine.RecordActivityHeartbeat); then the activity
// is retried per its RetryPolicy, and the old token is refused. Return it
// as it is: the value returned with it is ignored.
var ErrResultPending = errors.New("activity result pending: it is completed later with its task token")

// Error classes of the two wrappers, as returned by [ErrorClass].
const (
	classPermanent   = "permanent"
	classRateLimited = "rate_limited"
)

// permanentError is the error returned by [Permanent].
type permanentError struct {
	err error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// rateLimitedError is the error returned by [RateLimited].
type rateLimitedError struct {
	err        error
	retryAfter time.Duration
}

func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("%s (retry after %v)", e.err, e.retryAfter)
}
func (e *rateLimitedError) Unwrap() error { return e.err }

// Permanent marks err as an error that no retry can fix: an activity that
// returns it fails at once, whatever its [RetryPolicy]. The result prints as
// err and unwraps to it, so [errors.Is] and [errors.As] see err through it.
// Permanent returns nil if err is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// RateLimited marks err as the answer of a service that asks to be called
// again later: the activity is retried after retryAfter, and that retry does
// not count against [RetryPolicy.MaximumAttempts] but against
// [RetryPolicy.MaximumRateLimitedRetries]. A negative retryAfter counts as 0.
// The result prints as err followed by " (retry after 3s)" and unwraps to err,
// so [errors.Is] and [errors.As] see err through it. RateLimited returns nil if
// err is nil.
func RateLimited(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &rateLimitedError{err: err, retryAfter: max(retryAfter, 0)}
}

// IsPermanent reports whether err or any error in its chain was made by
// [Permanent].
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*permanentError](err)
	return ok
}

// RetryAfter returns the delay given to [RateLimited] and true if err or any
// error in its chain was made by RateLimited; the outermost such error counts.
// It returns 0 and false otherwise.
func RetryAfter(err error) (time.Duration, bool) {
	e, ok := errors.AsType[*rateLimitedError](err)
	if !ok {
		return 0, false
	}
	return e.retryAfter, true
}

// fmtWrapError is the type of the errors that fmt.Errorf returns for a format
// with one %w verb.
var fmtWrapError = reflect.TypeOf(fmt.Errorf("%w", errors.New("")))

// ErrorClass names the kind of err, for failure records and for
// [RetryPolicy.NonRetryableErrorTypes]. It returns
//
//   - "" if err is nil;
//   - "permanent" if [IsPermanent] reports true for err;
//   - else "rate_limited" if [RetryAfter] reports true for err;
//   - else, if err's chain holds an [ApplicationError], its Type, or
//     "application" if that is empty;
//   - else the Go type, as fmt's %T verb formats it, of the first error in
//     err's chain that does more than add a message: ErrorClass calls
//     [errors.Unwrap] past every error made by fmt.Errorf with one %w verb and
//     names the first other error it reaches.
//
// So an [errors.New] error has class "*errors.errorString" however many times
// fmt.Errorf wrapped it, and a failed [os.Open] has class "*fs.PathError",
// although a *fs.PathError itself wraps a syscall.Errno: an error type that
// carries fields of its own names the error better than the cause it wraps.
// %T names a type by the name of its package, not by its import path, so the
// error types of a main package have classes like "*main.T". An error
// that wraps several, made by [errors.Join] or by fmt.Errorf with two or more
// %w verbs, is named itself: "*errors.joinError" or "*fmt.wrapErrors".
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case IsPermanent(err):
		return classPermanent
	}
	if _, ok := RetryAfter(err); ok {
		return classRateLimited
	}
	if e, ok := errors.AsType[*ApplicationError](err); ok {
		if e.Type == "" {
			return classApplication
		}
		return e.Type
	}
	for reflect.TypeOf(err) == fmtWrapError {
		inner := errors.Unwrap(err)
		if inner == nil { // fmt.Errorf("%w", nil)
			break
		}
		err = inner
	}
	return fmt.Sprintf("%T", err)
}
