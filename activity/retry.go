package activity

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of [RetryPolicy], filled in by [RetryPolicy.WithDefaults].
const (
	defaultInitialInterval           = time.Second
	defaultBackoffCoefficient        = 2.0
	defaultMaximumInterval           = time.Hour
	defaultMaximumAttempts           = 10
	defaultMaximumRateLimitedRetries = 100
)

// RetryPolicy says how often and how soon a failed activity is tried again.
// The zero value means the defaults listed with each field.
//
// After failed attempt n, attempt n+1 starts after a delay drawn uniformly from
// [0, min(MaximumInterval, InitialInterval × BackoffCoefficient^(n-1))] (full
// jitter); see [RetryPolicy.Delay]. An error is not retried when it is
// [Permanent] or a non-retryable [ApplicationError], when its [ErrorClass]
// (an ApplicationError's Type) is in NonRetryableErrorTypes, or when
// MaximumAttempts attempts have been made. A [RateLimited] error is retried
// after its own delay and does not count against MaximumAttempts.
type RetryPolicy struct {
	// InitialInterval is the upper bound of the delay after the first failed
	// attempt. Default 1s, or MaximumInterval if that is shorter.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the upper bound after each further failed
	// attempt. It must be at least 1; 1 keeps the bound at InitialInterval.
	// Default 2.
	BackoffCoefficient float64
	// MaximumInterval caps the upper bound of every delay. It must not be below
	// InitialInterval. Default 1h, or InitialInterval if that is longer.
	MaximumInterval time.Duration
	// MaximumAttempts is how many attempts are made in all, counting the first
	// and not counting retries of RateLimited errors; 1 means no retries.
	// Default 10.
	MaximumAttempts int
	// NonRetryableErrorTypes lists error classes, as returned by [ErrorClass],
	// that fail the activity at once, such as "*fs.PathError" or the Type of
	// an [ApplicationError] ("CardDeclined"). Default none.
	NonRetryableErrorTypes []string `json:",omitzero"`
	// MaximumRateLimitedRetries caps the retries of [RateLimited] errors, which
	// do not count against MaximumAttempts. Default 100.
	MaximumRateLimitedRetries int
}

// WithDefaults returns a copy of p in which every zero field holds its default.
// It leaves invalid values, such as negative ones, for [RetryPolicy.Validate]
// to report.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.InitialInterval == 0 {
		p.InitialInterval = defaultInitialInterval
		if p.MaximumInterval > 0 {
			p.InitialInterval = min(defaultInitialInterval, p.MaximumInterval)
		}
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = defaultBackoffCoefficient
	}
	if p.MaximumInterval == 0 {
		p.MaximumInterval = max(defaultMaximumInterval, p.InitialInterval)
	}
	if p.MaximumAttempts == 0 {
		p.MaximumAttempts = defaultMaximumAttempts
	}
	if p.MaximumRateLimitedRetries == 0 {
		p.MaximumRateLimitedRetries = defaultMaximumRateLimitedRetries
	}
	return p
}

// Validate reports the first invalid field of p, naming the field and the
// values it allows. Zero fields are valid: they mean the defaults.
func (p RetryPolicy) Validate() error {
	if p.InitialInterval < 0 {
		return fmt.Errorf("retry policy: InitialInterval %v is negative (want > 0, or 0 for the default %v)",
			p.InitialInterval, defaultInitialInterval)
	}
	switch c := p.BackoffCoefficient; {
	case math.IsNaN(c) || math.IsInf(c, 0):
		return fmt.Errorf("retry policy: BackoffCoefficient %v is not a finite number (want >= 1)", c)
	case c != 0 && c < 1:
		return fmt.Errorf("retry policy: BackoffCoefficient %v is below 1", c)
	}
	if p.MaximumInterval < 0 {
		return fmt.Errorf("retry policy: MaximumInterval %v is negative (want >= InitialInterval, or 0 for the default %v)",
			p.MaximumInterval, defaultMaximumInterval)
	}
	if d := p.WithDefaults(); d.MaximumInterval < d.InitialInterval {
		return fmt.Errorf("retry policy: MaximumInterval %v is below InitialInterval %v",
			d.MaximumInterval, d.InitialInterval)
	}
	if p.MaximumAttempts < 0 {
		return fmt.Errorf("retry policy: MaximumAttempts %d is negative (want >= 1, where 1 means no retries, or 0 for the default %d)",
			p.MaximumAttempts, defaultMaximumAttempts)
	}
	if p.MaximumRateLimitedRetries < 0 {
		return fmt.Errorf("retry policy: MaximumRateLimitedRetries %d is negative (want >= 1, or 0 for the default %d)",
			p.MaximumRateLimitedRetries, defaultMaximumRateLimitedRetries)
	}
	for i, class := range p.NonRetryableErrorTypes {
		if class == "" {
			return fmt.Errorf("retry policy: NonRetryableErrorTypes[%d] is empty (want an error class such as %q)",
				i, "*fs.PathError")
		}
	}
	return nil
}

// Delay returns the delay before the attempt that follows failed attempt
// attempt (1-based): a duration drawn by rnd uniformly from
// [0, min(MaximumInterval, InitialInterval × BackoffCoefficient^(attempt-1))].
// rnd returns a number in [0, 1), as [math/rand/v2.Float64] does; nil means
// that function. Delay fills in defaults first and caps the bound at
// MaximumInterval however large attempt is; an attempt below 1 counts as 1.
//
// Delay never returns a negative duration or one above MaximumInterval: it
// treats a value of rnd outside [0, 1] as the nearest end of that range, and
// an invalid policy (see [RetryPolicy.Validate]) as the nearest valid one.
func (p RetryPolicy) Delay(attempt int, rnd func() float64) time.Duration {
	if rnd == nil {
		rnd = rand.Float64
	}
	r := rnd()
	switch {
	case math.IsNaN(r) || r <= 0:
		return 0
	case r > 1:
		r = 1
	}
	bound := p.delayBound(attempt)
	d := r * float64(bound)
	if d >= float64(bound) { // float64(bound) may round above the largest Duration
		return bound
	}
	return time.Duration(d)
}

// delayBound returns the upper bound of the delay after failed attempt
// attempt: min(MaximumInterval, InitialInterval × BackoffCoefficient^(attempt-1)),
// computed without overflow.
func (p RetryPolicy) delayBound(attempt int) time.Duration {
	p = p.WithDefaults()
	maxInterval := max(p.MaximumInterval, 0)
	initial := min(max(p.InitialInterval, 0), maxInterval)
	coef := p.BackoffCoefficient
	if math.IsNaN(coef) || coef < 1 {
		coef = 1
	}
	attempt = max(attempt, 1)
	bound := float64(initial) * math.Pow(coef, float64(attempt-1)) // +Inf when too large
	if bound >= float64(maxInterval) {
		return maxInterval
	}
	return time.Duration(bound)
}
