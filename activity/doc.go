// Package activity is the API that activity functions use to learn about the
// attempt they run in, to report progress, and to tell the engine how a failure
// should be retried.
//
// An activity is an ordinary Go function with one input and one output,
//
//	func(ctx context.Context, in In) (Out, error)
//
// registered with the engine and scheduled from workflow code. Unlike workflow
// code, an activity may do anything: call services, write files, read the clock.
// The engine runs it on a worker under a lease, records its result in the
// workflow's history, and retries it according to a [RetryPolicy] when it fails.
// This package imports nothing else of the module, so activity code and its
// tests depend only on the standard library and this package.
//
// # At-least-once execution
//
// An activity runs at least once, not exactly once. A worker can crash after the
// side effect but before its result is recorded, a lease can expire while the
// function is still running, and a failed attempt is retried. Write activities so
// that running them twice has the effect of running them once. The usual tool is
// [Info.IdempotencyKey], which stays the same across every retry and redelivery of
// one scheduled activity: pass it to the payment provider as its idempotency key,
// use it as a unique key in your own tables, or name the object you upload with it.
//
//	func Charge(ctx context.Context, in ChargeInput) (Receipt, error) {
//		key := activity.GetInfo(ctx).IdempotencyKey
//		return payments.Charge(ctx, key, in.Amount)
//	}
//
// # Attempt information
//
// [GetInfo] returns the [Info] of the attempt running in ctx: the activity's
// name, its 1-based attempt number, the queue, the workflow and run it belongs to
// (empty for standalone jobs), and the time at which the attempt's lease or
// timeout ends. [NewContext] builds a context that carries an Info; the engine
// uses it, and so can unit tests that call an activity function directly.
//
// # Heartbeats
//
// A long activity calls [RecordHeartbeat] now and then. A heartbeat tells the
// engine that the attempt is alive, which keeps its [Options.HeartbeatTimeout]
// from expiring, and stores the given details as JSON. When the attempt fails or its worker dies, the next attempt
// finds the last details in [Info.HeartbeatDetails] and can resume from there
// instead of starting over. RecordHeartbeat returns an error when the details
// cannot be encoded or when the engine refused the heartbeat because the lease was
// lost; in the latter case another worker may already be running the activity,
// and the attempt should stop. Outside the engine (in a unit test, say)
// RecordHeartbeat only checks that the details encode.
//
// # Errors
//
// An error returned by an activity is retried by default. Two wrappers change
// that, and both keep the wrapped error visible to [errors.Is] and [errors.As]:
//
//   - [Permanent](err) is never retried: the activity fails at once. Use it for
//     errors that another attempt cannot fix, such as invalid input or a declined
//     card.
//   - [RateLimited](err, retryAfter) is retried after retryAfter, and the retry
//     does not count against [RetryPolicy.MaximumAttempts]. Use it when a service
//     answers "429 Too Many Requests". At most
//     [RetryPolicy.MaximumRateLimitedRetries] such retries are made.
//
// [IsPermanent] and [RetryAfter] look for the wrappers anywhere in an error's
// chain. [ErrorClass] names an error's kind ("permanent", "rate_limited", or the
// Go type of the underlying error such as "*fs.PathError"); the engine records it
// with each failure, and [RetryPolicy.NonRetryableErrorTypes] lists classes that
// are never retried.
//
// # Retries
//
// A failed attempt n is followed by attempt n+1 after a random delay drawn
// uniformly ("full jitter") from
//
//	[0, min(MaximumInterval, InitialInterval × BackoffCoefficient^(n-1))]
//
// until MaximumAttempts attempts have been made. The zero [RetryPolicy] means the
// defaults: InitialInterval 1s, BackoffCoefficient 2, MaximumInterval 1h,
// MaximumAttempts 10 and MaximumRateLimitedRetries 100. With these defaults the
// upper bound of the delay doubles from 1s after the first attempt to 256s after
// the ninth, and an activity that keeps failing gives up after its tenth attempt.
// Full jitter spreads the retries of many activities that failed together, so
// they do not hit a recovering service at the same moment. [RetryPolicy.Delay]
// computes one such delay. [Options.ScheduleToCloseTimeout], when set, bounds all
// attempts and their delays together.
package activity
