package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After a short claim, a poller claims again at once for a task that came
// due since, and otherwise sleeps until the next task is due, at most a
// poll interval; never the whole interval for a task due sooner.
func TestPollWait(t *testing.T) {
	claimedAt := time.Date(2026, 12, 3, 21, 32, 1, 344_000_000, time.UTC)
	const poll = 5 * time.Second
	tests := []struct {
		name     string
		due, now time.Time
		again    bool
		wait     time.Duration
	}{
		{"came due since the claim", claimedAt.Add(300 * time.Microsecond), claimedAt.Add(time.Millisecond), true, 0},
		{"comes due in a moment", claimedAt.Add(300 * time.Microsecond), claimedAt.Add(100 * time.Microsecond), false, 200 * time.Microsecond},
		{"due exactly now", claimedAt.Add(time.Millisecond), claimedAt.Add(time.Millisecond), true, 0},
		{"due before the claim: another type's", claimedAt.Add(-time.Second), claimedAt.Add(time.Millisecond), false, poll},
		{"due in an hour", claimedAt.Add(time.Hour), claimedAt, false, poll},
	}
	for _, tt := range tests {
		again, wait := pollWait(tt.due, claimedAt, tt.now, poll)
		require.Equal(t, tt.again, again, tt.name)
		require.Equal(t, tt.wait, wait, tt.name)
	}
}
