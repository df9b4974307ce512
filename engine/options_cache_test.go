package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
)

func TestDecodeActivityOptionsCaches(t *testing.T) {
	t.Parallel()
	want := activity.Options{Queue: "cache-test", StartToCloseTimeout: time.Second,
		Retry: activity.RetryPolicy{NonRetryableErrorTypes: []string{"bad"}}}
	raw, err := json.Marshal(want)
	require.NoError(t, err)
	for range 2 { // decoded, then from the cache
		got, err := decodeActivityOptions(raw)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	optionsCache.mu.RLock()
	_, ok := optionsCache.m[string(raw)]
	optionsCache.mu.RUnlock()
	require.True(t, ok)

	got, err := decodeActivityOptions(nil)
	require.NoError(t, err)
	require.Zero(t, got)
	_, err = decodeActivityOptions(json.RawMessage(`{"Queue":`))
	require.Error(t, err)
}
