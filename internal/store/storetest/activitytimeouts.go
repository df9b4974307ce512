package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// testUnstartedActivitiesArePastTheirScheduleToStart checks that
// UnstartedActivities lists the tasks never claimed whose schedule-to-start
// timeout has ended, and only those, and that a claim since then refuses
// the resolution at attempt 0 the engine makes of one.
func testUnstartedActivitiesArePastTheirScheduleToStart(t *testing.T, b *bundle) {
	timed := b.job("timed", `1`)
	timed.Options = json.RawMessage(`{"Queue":"act","ScheduleToStartTimeout":1000000000}`) // 1s
	id, _, err := b.s.EnqueueJob(b.ctx, store.EnqueueJobParams{Task: timed, Now: b.now})
	require.NoError(t, err)
	b.enqueueJob(t, "untimed", `2`)
	list := func(now time.Time) []store.ActivityTask {
		t.Helper()
		got, err := b.s.UnstartedActivities(b.ctx, now, 10)
		require.NoError(t, err)
		return got
	}

	require.Empty(t, list(b.now.Add(999*time.Millisecond)), "the timeout has not ended")
	deadline := b.now.Add(time.Second)
	due := list(deadline)
	require.Len(t, due, 1, "the timed job is due, the untimed one never")
	require.Equal(t, id, due[0].ID)
	require.Equal(t, "Ship", due[0].Activity)
	require.Equal(t, actQueue, due[0].Queue)
	requireTime(t, b.now, due[0].ScheduledAt, "ScheduledAt")
	require.JSONEq(t, string(timed.Options), string(due[0].Options))

	claimed := b.claimActivity(t, worker, 10, deadline)
	require.Len(t, claimed, 2)
	require.Empty(t, list(deadline), "a claimed task has started")
	failed := history.ActivityFailed{Failure: history.Failure{Message: "schedule-to-start timeout", Class: "timeout"}}
	_, err = b.s.ResolveActivity(b.ctx, store.ResolveActivityParams{TaskID: id, Attempt: 0, Event: failed, Now: deadline})
	require.ErrorIs(t, err, store.ErrLeaseLost, "a claim since the listing refuses the timeout")
	for _, c := range claimed {
		require.NoError(t, b.s.RetryActivity(b.ctx, store.RetryActivityParams{TaskID: c.ID, Attempt: c.Attempt,
			RunAfter: deadline.Add(time.Hour), Error: "x", ErrorClass: "error", Now: deadline}))
	}
	require.Empty(t, list(deadline.Add(time.Hour)), "a task given back for a retry has started all the same")
}
