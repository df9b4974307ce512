package activity_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
)

// fixed returns a rnd for [activity.RetryPolicy.Delay] that always returns r.
func fixed(r float64) func() float64 {
	return func() float64 { return r }
}

// justBelowOne is the largest float64 below 1, the largest value of a rnd.
var justBelowOne = math.Nextafter(1, 0)

func TestRetryPolicyWithDefaults(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		in   activity.RetryPolicy
		want activity.RetryPolicy
	}{
		{
			name: "zero",
			want: activity.RetryPolicy{
				InitialInterval:           time.Second,
				BackoffCoefficient:        2,
				MaximumInterval:           time.Hour,
				MaximumAttempts:           10,
				MaximumRateLimitedRetries: 100,
			},
		},
		{
			name: "set fields kept",
			in: activity.RetryPolicy{
				InitialInterval:           3 * time.Second,
				BackoffCoefficient:        1.5,
				MaximumInterval:           time.Minute,
				MaximumAttempts:           1,
				NonRetryableErrorTypes:    []string{"*fs.PathError"},
				MaximumRateLimitedRetries: 7,
			},
			want: activity.RetryPolicy{
				InitialInterval:           3 * time.Second,
				BackoffCoefficient:        1.5,
				MaximumInterval:           time.Minute,
				MaximumAttempts:           1,
				NonRetryableErrorTypes:    []string{"*fs.PathError"},
				MaximumRateLimitedRetries: 7,
			},
		},
		{
			name: "long initial interval raises default maximum",
			in:   activity.RetryPolicy{InitialInterval: 2 * time.Hour},
			want: activity.RetryPolicy{
				InitialInterval:           2 * time.Hour,
				BackoffCoefficient:        2,
				MaximumInterval:           2 * time.Hour,
				MaximumAttempts:           10,
				MaximumRateLimitedRetries: 100,
			},
		},
		{
			name: "short maximum interval lowers default initial",
			in:   activity.RetryPolicy{MaximumInterval: 500 * time.Millisecond},
			want: activity.RetryPolicy{
				InitialInterval:           500 * time.Millisecond,
				BackoffCoefficient:        2,
				MaximumInterval:           500 * time.Millisecond,
				MaximumAttempts:           10,
				MaximumRateLimitedRetries: 100,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.in.WithDefaults()
			require.Equal(t, tt.want, got)
			require.NoError(t, got.Validate())
			require.Equal(t, got, got.WithDefaults(), "WithDefaults is idempotent")
		})
	}
}

func TestRetryPolicyWithDefaultsKeepsInvalidValues(t *testing.T) {
	t.Parallel()

	got := activity.RetryPolicy{InitialInterval: -1, MaximumAttempts: -1}.WithDefaults()
	require.Equal(t, activity.RetryPolicy{
		InitialInterval:           -1,
		BackoffCoefficient:        2,
		MaximumInterval:           time.Hour,
		MaximumAttempts:           -1,
		MaximumRateLimitedRetries: 100,
	}, got)
	require.EqualError(t, got.Validate(), "retry policy: InitialInterval -1ns is negative (want > 0, or 0 for the default 1s)",
		"Validate still reports what WithDefaults left alone")
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		p       activity.RetryPolicy
		wantErr string // empty: valid
	}{
		{name: "zero", p: activity.RetryPolicy{}},
		{name: "defaults", p: activity.RetryPolicy{}.WithDefaults()},
		{name: "no retries", p: activity.RetryPolicy{MaximumAttempts: 1}},
		{name: "constant backoff", p: activity.RetryPolicy{BackoffCoefficient: 1}},
		{name: "equal intervals", p: activity.RetryPolicy{InitialInterval: time.Minute, MaximumInterval: time.Minute}},
		{
			name:    "negative initial interval",
			p:       activity.RetryPolicy{InitialInterval: -time.Second},
			wantErr: "retry policy: InitialInterval -1s is negative (want > 0, or 0 for the default 1s)",
		},
		{
			name:    "coefficient below 1",
			p:       activity.RetryPolicy{BackoffCoefficient: 0.5},
			wantErr: "retry policy: BackoffCoefficient 0.5 is below 1",
		},
		{
			name:    "negative coefficient",
			p:       activity.RetryPolicy{BackoffCoefficient: -2},
			wantErr: "retry policy: BackoffCoefficient -2 is below 1",
		},
		{
			name:    "NaN coefficient",
			p:       activity.RetryPolicy{BackoffCoefficient: math.NaN()},
			wantErr: "retry policy: BackoffCoefficient NaN is not a finite number (want >= 1)",
		},
		{
			name:    "infinite coefficient",
			p:       activity.RetryPolicy{BackoffCoefficient: math.Inf(1)},
			wantErr: "retry policy: BackoffCoefficient +Inf is not a finite number (want >= 1)",
		},
		{
			name:    "negative maximum interval",
			p:       activity.RetryPolicy{MaximumInterval: -time.Minute},
			wantErr: "retry policy: MaximumInterval -1m0s is negative (want >= InitialInterval, or 0 for the default 1h0m0s)",
		},
		{
			name:    "maximum below initial",
			p:       activity.RetryPolicy{InitialInterval: time.Minute, MaximumInterval: time.Second},
			wantErr: "retry policy: MaximumInterval 1s is below InitialInterval 1m0s",
		},
		{
			name:    "negative maximum attempts",
			p:       activity.RetryPolicy{MaximumAttempts: -1},
			wantErr: "retry policy: MaximumAttempts -1 is negative (want >= 1, where 1 means no retries, or 0 for the default 10)",
		},
		{
			name:    "negative rate-limited retries",
			p:       activity.RetryPolicy{MaximumRateLimitedRetries: -3},
			wantErr: "retry policy: MaximumRateLimitedRetries -3 is negative (want >= 1, or 0 for the default 100)",
		},
		{
			name:    "empty error type",
			p:       activity.RetryPolicy{NonRetryableErrorTypes: []string{"*fs.PathError", ""}},
			wantErr: `retry policy: NonRetryableErrorTypes[1] is empty (want an error class such as "*fs.PathError")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

func TestRetryPolicyDelayWithinFullJitterBounds(t *testing.T) {
	t.Parallel()

	p := activity.RetryPolicy{} // defaults: 1s × 2^(n-1), capped at 1h
	rng := rand.New(rand.NewPCG(1, 2))
	for attempt := 1; attempt <= 13; attempt++ {
		bound := min(time.Hour, time.Second<<(attempt-1))
		seen := make(map[time.Duration]bool)
		for range 200 {
			d := p.Delay(attempt, rng.Float64)
			require.GreaterOrEqual(t, d, time.Duration(0), "attempt %d", attempt)
			require.LessOrEqual(t, d, bound, "attempt %d", attempt)
			seen[d] = true
		}
		require.Greater(t, len(seen), 100, "attempt %d: delays are jittered", attempt)
	}
}

func TestRetryPolicyDelayNotAllEqual(t *testing.T) {
	t.Parallel()

	// With the global source, as the engine uses it.
	p := activity.RetryPolicy{InitialInterval: 100 * time.Millisecond}
	seen := make(map[time.Duration]bool)
	for attempt := 1; attempt <= 13; attempt++ {
		d := p.Delay(attempt, nil)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, min(time.Hour, 100*time.Millisecond<<(attempt-1)))
		seen[d] = true
	}
	require.Greater(t, len(seen), 1, "13 delays drawn from nil rnd are not all equal")
}

func TestRetryPolicyDelayExact(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		p       activity.RetryPolicy
		attempt int
		r       float64
		want    time.Duration
	}{
		{name: "first attempt half", attempt: 1, r: 0.5, want: 500 * time.Millisecond},
		{name: "second attempt half", attempt: 2, r: 0.5, want: time.Second},
		{name: "zero rnd", attempt: 5, r: 0, want: 0},
		{name: "attempt below 1 counts as 1", attempt: 0, r: 0.5, want: 500 * time.Millisecond},
		{name: "negative attempt", attempt: -7, r: 0.5, want: 500 * time.Millisecond},
		{name: "cap", attempt: 13, r: 0.5, want: 30 * time.Minute},
		{
			name:    "custom coefficient",
			p:       activity.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 3},
			attempt: 3, r: 0.5, want: 4500 * time.Millisecond,
		},
		{
			name:    "custom cap",
			p:       activity.RetryPolicy{MaximumInterval: 10 * time.Second},
			attempt: 5, r: 0.5, want: 5 * time.Second,
		},
		{
			name:    "coefficient 1 is constant",
			p:       activity.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 1},
			attempt: 50, r: 0.25, want: 500 * time.Millisecond,
		},
		{name: "rnd above 1 clamped", attempt: 1, r: 7, want: time.Second},
		{name: "negative rnd clamped", attempt: 1, r: -1, want: 0},
		{name: "NaN rnd clamped", attempt: 1, r: math.NaN(), want: 0},
		{
			name:    "invalid coefficient treated as 1",
			p:       activity.RetryPolicy{BackoffCoefficient: 0.5},
			attempt: 10, r: 0.5, want: 500 * time.Millisecond,
		},
		{
			name:    "negative intervals give 0",
			p:       activity.RetryPolicy{InitialInterval: -time.Second, MaximumInterval: -time.Second},
			attempt: 3, r: 0.5, want: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Delay(tt.attempt, fixed(tt.r)))
		})
	}
}

func TestRetryPolicyDelayCap(t *testing.T) {
	t.Parallel()

	p := activity.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute}
	for attempt := 1; attempt <= 100; attempt++ {
		d := p.Delay(attempt, fixed(justBelowOne))
		require.LessOrEqual(t, d, time.Minute, "attempt %d", attempt)
		if attempt >= 8 { // 2^6 s = 64s > 1m from attempt 7 on
			require.InDelta(t, float64(time.Minute), float64(d), float64(time.Microsecond), "attempt %d", attempt)
		}
	}
}

func TestRetryPolicyDelayHugeAttemptNoOverflow(t *testing.T) {
	t.Parallel()

	policies := []activity.RetryPolicy{
		{},
		{BackoffCoefficient: 1e300},
		{InitialInterval: time.Duration(math.MaxInt64), MaximumInterval: time.Duration(math.MaxInt64)},
		{InitialInterval: time.Hour, BackoffCoefficient: 10, MaximumInterval: time.Duration(math.MaxInt64)},
	}
	for _, p := range policies {
		maxInterval := p.WithDefaults().MaximumInterval
		for _, attempt := range []int{63, 64, 1000, 1 << 20, math.MaxInt} {
			for _, r := range []float64{0.5, justBelowOne, 1} {
				d := p.Delay(attempt, fixed(r))
				require.GreaterOrEqual(t, d, time.Duration(0), "policy %+v attempt %d r %v", p, attempt, r)
				require.LessOrEqual(t, d, maxInterval, "policy %+v attempt %d r %v", p, attempt, r)
			}
			require.Equal(t, maxInterval, p.Delay(attempt, fixed(1)), "policy %+v attempt %d: bound is the cap", p, attempt)
		}
	}
	require.Equal(t, 30*time.Minute, activity.RetryPolicy{}.Delay(1000, fixed(0.5)))
}
