package workflow

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
)

func TestEncodeOptionsIsJSONMarshal(t *testing.T) {
	cases := []activity.Options{
		{},
		activity.Options{Name: "charge", Queue: "payments"}.WithDefaults(),
		{Name: "a", StartToCloseTimeout: time.Second, ScheduleToCloseTimeout: time.Hour, HeartbeatTimeout: time.Minute,
			Retry: activity.RetryPolicy{InitialInterval: time.Millisecond, BackoffCoefficient: 1.5, MaximumInterval: time.Second,
				MaximumAttempts: 3, MaximumRateLimitedRetries: 7, NonRetryableErrorTypes: []string{"x", "y"}}},
		{Name: "a", Retry: activity.RetryPolicy{NonRetryableErrorTypes: []string{""}}},
		{Name: "a", Retry: activity.RetryPolicy{NonRetryableErrorTypes: []string{"x\x00y"}}},
		{Name: "a", Retry: activity.RetryPolicy{NonRetryableErrorTypes: []string{"x", "y"}}},
	}
	for range 2 { // the second round comes from the cache
		for _, o := range cases {
			want, err := json.Marshal(o)
			require.NoError(t, err)
			got, err := encodeOptions(o)
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(got))
			require.Equal(t, len(got), cap(got), "an append by a holder must copy")
		}
	}
	// Options that differ only in their non-retryable types have keys that differ.
	require.NotEqual(t, keyOf(cases[3]), keyOf(activity.Options{Name: "a"}))
	require.NotEqual(t, keyOf(cases[4]), keyOf(cases[5]))

	// Types with NUL bytes would make keys that join alike: they are not cached.
	a := activity.Options{Retry: activity.RetryPolicy{NonRetryableErrorTypes: []string{"a\x00", "b"}}}
	b := activity.Options{Retry: activity.RetryPolicy{NonRetryableErrorTypes: []string{"a", "\x00b"}}}
	for _, o := range []activity.Options{a, b, a} {
		want, err := json.Marshal(o)
		require.NoError(t, err)
		got, err := encodeOptions(o)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
	}
}

// TestOptionsKeyCoversEveryField fails when activity.Options or
// activity.RetryPolicy gains a field that optionsKey does not hold: options
// that differ in it would share one cached encoding.
func TestOptionsKeyCoversEveryField(t *testing.T) {
	opts := reflect.TypeFor[activity.Options]().NumField() - 1 // Retry is a struct of its own
	retry := reflect.TypeFor[activity.RetryPolicy]().NumField()
	key := reflect.TypeFor[optionsKey]().NumField() - 1 // nonRetryableCount goes with nonRetryable
	require.Equal(t, opts+retry, key)
}

func TestEncodeOptionsFailsOnWhatJSONCannotHold(t *testing.T) {
	_, err := encodeOptions(activity.Options{Retry: activity.RetryPolicy{BackoffCoefficient: math.Inf(1)}})
	require.Error(t, err)
}
