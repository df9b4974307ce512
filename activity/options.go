package activity

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of [Options], filled in by [Options.WithDefaults].
const (
	defaultQueue               = "default"
	defaultStartToCloseTimeout = time.Minute
)

// maxNameLen is the longest Name and Queue that [Options.Validate] accepts, in
// bytes.
const maxNameLen = 200

// Options configure an activity: at registration with the engine, and per call
// from workflow code, which overrides the registered options. The zero value
// means the defaults listed with each field. Options are recorded as JSON with
// each scheduled activity; the fields whose zero value means "none" (the
// schedule-to-close, schedule-to-start and heartbeat timeouts, the
// non-retryable error types)
// are left out of it when zero.
type Options struct {
	// Name is the name the activity is registered and recorded under. It must
	// be valid UTF-8 of at most 200 bytes. Default: the function's name.
	Name string
	// Queue is the queue that attempts are put on; only workers that poll it
	// run them. It must be valid UTF-8 of at most 200 bytes. Default "default".
	Queue string
	// StartToCloseTimeout limits one attempt, and is the length of its lease:
	// an attempt that has not finished by then fails and is retried. Default
	// 1 minute.
	StartToCloseTimeout time.Duration
	// ScheduleToCloseTimeout limits all attempts together, counted from when
	// the activity was scheduled and including the delays between attempts.
	// Default 0, which means no limit.
	ScheduleToCloseTimeout time.Duration `json:",omitzero"`
	// ScheduleToStartTimeout, when set, fails the activity for good if no
	// attempt has started within that time since it was scheduled: its
	// future fails with a "timeout" error, which is not retried, whether or
	// not any worker serves its queue. The engines running notice within
	// their PollInterval after the deadline. An attempt that started counts
	// as started even if its claim was given back. Default 0, which means
	// no limit.
	ScheduleToStartTimeout time.Duration `json:",omitzero"`
	// WaitForCancellation makes the activity's future, when the workflow
	// cancels it (its run is canceled), wait until the running attempt has
	// acknowledged: it returned after learning of the cancel at a heartbeat
	// ([ErrCanceled]), or finished anyway. Its cleanup then runs before the
	// workflow goes on. An activity not running at the time is canceled at
	// once. Default false: the future fails with the workflow's ErrCanceled
	// at once, and the attempt learns of it at its next heartbeat.
	WaitForCancellation bool `json:",omitzero"`
	// HeartbeatTimeout, when set, fails an attempt that has not called
	// [RecordHeartbeat] within that time since it started or since its last
	// heartbeat. Default 0, which means no heartbeat timeout.
	HeartbeatTimeout time.Duration `json:",omitzero"`
	// Retry says how failed attempts are retried. Its zero value means the
	// defaults of [RetryPolicy].
	Retry RetryPolicy
}

// WithDefaults returns a copy of o in which the zero Queue and
// StartToCloseTimeout hold their defaults and Retry is filled in by
// [RetryPolicy.WithDefaults]. It leaves Name alone, since its default depends on
// the function, and leaves invalid values for [Options.Validate] to report.
func (o Options) WithDefaults() Options {
	if o.Queue == "" {
		o.Queue = defaultQueue
	}
	if o.StartToCloseTimeout == 0 {
		o.StartToCloseTimeout = defaultStartToCloseTimeout
	}
	o.Retry = o.Retry.WithDefaults()
	return o
}

// Validate reports the first invalid field of o: a Name or Queue that is not
// valid UTF-8 or is longer than 200 bytes, a negative timeout, or an invalid
// Retry (see [RetryPolicy.Validate]). Zero fields are valid: they mean the
// defaults.
func (o Options) Validate() error {
	if err := validateName("Name", o.Name); err != nil {
		return err
	}
	if err := validateName("Queue", o.Queue); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"StartToCloseTimeout", o.StartToCloseTimeout},
		{"ScheduleToCloseTimeout", o.ScheduleToCloseTimeout},
		{"ScheduleToStartTimeout", o.ScheduleToStartTimeout},
		{"HeartbeatTimeout", o.HeartbeatTimeout},
	} {
		if f.d < 0 {
			return fmt.Errorf("activity options: %s %v is negative (want > 0, or 0 for the default)", f.name, f.d)
		}
	}
	if err := o.Retry.Validate(); err != nil {
		return fmt.Errorf("activity options: %w", err)
	}
	return nil
}

// validateName checks a Name or Queue of [Options].
func validateName(field, s string) error {
	if len(s) > maxNameLen {
		return fmt.Errorf("activity options: %s is %d bytes long (want at most %d): %.40q...", field, len(s), maxNameLen, s)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("activity options: %s %q is not valid UTF-8", field, s)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("activity options: %s %q contains a NUL byte, which PostgreSQL text cannot hold", field, s)
	}
	return nil
}

// Merge returns o with every non-zero field of override laid over it, the
// retry policy field by field. Workflow code's per-call options are merged
// over the registered ones this way.
func (o Options) Merge(override Options) Options {
	if override.Name != "" {
		o.Name = override.Name
	}
	if override.Queue != "" {
		o.Queue = override.Queue
	}
	if override.StartToCloseTimeout != 0 {
		o.StartToCloseTimeout = override.StartToCloseTimeout
	}
	if override.ScheduleToCloseTimeout != 0 {
		o.ScheduleToCloseTimeout = override.ScheduleToCloseTimeout
	}
	if override.ScheduleToStartTimeout != 0 {
		o.ScheduleToStartTimeout = override.ScheduleToStartTimeout
	}
	if override.WaitForCancellation {
		o.WaitForCancellation = true
	}
	if override.HeartbeatTimeout != 0 {
		o.HeartbeatTimeout = override.HeartbeatTimeout
	}
	r, or := &o.Retry, override.Retry
	if or.InitialInterval != 0 {
		r.InitialInterval = or.InitialInterval
	}
	if or.BackoffCoefficient != 0 {
		r.BackoffCoefficient = or.BackoffCoefficient
	}
	if or.MaximumInterval != 0 {
		r.MaximumInterval = or.MaximumInterval
	}
	if or.MaximumAttempts != 0 {
		r.MaximumAttempts = or.MaximumAttempts
	}
	if or.NonRetryableErrorTypes != nil {
		r.NonRetryableErrorTypes = or.NonRetryableErrorTypes
	}
	if or.MaximumRateLimitedRetries != 0 {
		r.MaximumRateLimitedRetries = or.MaximumRateLimitedRetries
	}
	return o
}
