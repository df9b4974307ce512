package activity_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
)

func TestOptionsWithDefaults(t *testing.T) {
	t.Parallel()

	got := activity.Options{Name: "charge"}.WithDefaults()
	require.Equal(t, activity.Options{
		Name:                "charge",
		Queue:               "default",
		StartToCloseTimeout: time.Minute,
		Retry:               activity.RetryPolicy{}.WithDefaults(),
	}, got)
	require.NoError(t, got.Validate())

	require.Empty(t, activity.Options{}.WithDefaults().Name, "Name has no default here")

	set := activity.Options{
		Queue:                  "payments",
		StartToCloseTimeout:    time.Second,
		ScheduleToCloseTimeout: time.Hour,
		HeartbeatTimeout:       10 * time.Second,
		Retry:                  activity.RetryPolicy{MaximumAttempts: 1},
	}.WithDefaults()
	require.Equal(t, "payments", set.Queue)
	require.Equal(t, time.Second, set.StartToCloseTimeout)
	require.Equal(t, time.Hour, set.ScheduleToCloseTimeout)
	require.Equal(t, 10*time.Second, set.HeartbeatTimeout)
	require.Equal(t, 1, set.Retry.MaximumAttempts)
	require.Equal(t, time.Second, set.Retry.InitialInterval)
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		o       activity.Options
		wantErr string // empty: valid
	}{
		{name: "zero", o: activity.Options{}},
		{
			name: "all set",
			o: activity.Options{
				Name:                   "charge",
				Queue:                  "payments",
				StartToCloseTimeout:    time.Minute,
				ScheduleToCloseTimeout: time.Hour,
				ScheduleToStartTimeout: 30 * time.Second,
				HeartbeatTimeout:       10 * time.Second,
				Retry:                  activity.RetryPolicy{MaximumAttempts: 3},
			},
		},
		{name: "200-byte queue", o: activity.Options{Queue: strings.Repeat("q", 200)}},
		{
			name:    "201-byte queue",
			o:       activity.Options{Queue: strings.Repeat("q", 201)},
			wantErr: `activity options: Queue is 201 bytes long (want at most 200): "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"...`,
		},
		{
			name:    "201-byte name",
			o:       activity.Options{Name: strings.Repeat("n", 201)},
			wantErr: `activity options: Name is 201 bytes long (want at most 200): "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"...`,
		},
		{
			name:    "invalid UTF-8 queue",
			o:       activity.Options{Queue: "q\xff"},
			wantErr: `activity options: Queue "q\xff" is not valid UTF-8`,
		},
		{
			name:    "negative start-to-close",
			o:       activity.Options{StartToCloseTimeout: -time.Second},
			wantErr: "activity options: StartToCloseTimeout -1s is negative (want > 0, or 0 for the default)",
		},
		{
			name:    "negative schedule-to-close",
			o:       activity.Options{ScheduleToCloseTimeout: -time.Second},
			wantErr: "activity options: ScheduleToCloseTimeout -1s is negative (want > 0, or 0 for the default)",
		},
		{
			name:    "negative schedule-to-start",
			o:       activity.Options{ScheduleToStartTimeout: -time.Second},
			wantErr: "activity options: ScheduleToStartTimeout -1s is negative (want > 0, or 0 for the default)",
		},
		{
			name:    "negative heartbeat timeout",
			o:       activity.Options{HeartbeatTimeout: -time.Second},
			wantErr: "activity options: HeartbeatTimeout -1s is negative (want > 0, or 0 for the default)",
		},
		{
			name:    "invalid retry policy",
			o:       activity.Options{Retry: activity.RetryPolicy{BackoffCoefficient: 0.5}},
			wantErr: "activity options: retry policy: BackoffCoefficient 0.5 is below 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.o.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

func TestOptionsMerge(t *testing.T) {
	t.Parallel()
	base := activity.Options{Name: "Charge", Queue: "payments", StartToCloseTimeout: time.Minute,
		Retry: activity.RetryPolicy{MaximumAttempts: 5, InitialInterval: time.Second}}
	got := base.Merge(activity.Options{Queue: "critical", Retry: activity.RetryPolicy{MaximumAttempts: 2}})
	require.Equal(t, activity.Options{Name: "Charge", Queue: "critical", StartToCloseTimeout: time.Minute,
		Retry: activity.RetryPolicy{MaximumAttempts: 2, InitialInterval: time.Second}}, got)
	require.Equal(t, base, base.Merge(activity.Options{}), "a zero override changes nothing")
	require.Equal(t, 30*time.Second, base.Merge(activity.Options{ScheduleToStartTimeout: 30 * time.Second}).ScheduleToStartTimeout)
}

// Recorded options leave out the fields whose zero value means "none", and
// read back as they were written, whether they were written with them or not.
func TestOptionsJSONLeavesOutNone(t *testing.T) {
	o := activity.Options{Name: "Charge", Queue: "payments"}.WithDefaults()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	for _, none := range []string{"ScheduleToCloseTimeout", "ScheduleToStartTimeout", "HeartbeatTimeout", "NonRetryableErrorTypes"} {
		require.NotContains(t, string(b), none)
	}
	var back activity.Options
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, o, back)

	// As older engines recorded them: every field, zeros and null included.
	old := `{"Name":"Charge","Queue":"payments","StartToCloseTimeout":60000000000,"ScheduleToCloseTimeout":0,
		"HeartbeatTimeout":0,"Retry":{"InitialInterval":1000000000,"BackoffCoefficient":2,"MaximumInterval":3600000000000,
		"MaximumAttempts":10,"NonRetryableErrorTypes":null,"MaximumRateLimitedRetries":100}}`
	back = activity.Options{}
	require.NoError(t, json.Unmarshal([]byte(old), &back))
	require.Equal(t, o, back)

	set := o
	set.HeartbeatTimeout, set.Retry.NonRetryableErrorTypes = time.Second, []string{"x"}
	b, err = json.Marshal(set)
	require.NoError(t, err)
	back = activity.Options{}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, set, back)
}
