package workflow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/workflow"
)

// A *Timer is a Future of struct{}.
var _ workflow.Future[struct{}] = (*workflow.Timer)(nil)

func TestTimer(t *testing.T) {
	t.Parallel()
	r, cmds := newTestRun(t, func(ctx workflow.Context) (map[string]string, error) {
		got := map[string]string{}
		observe := func(name string, tm *workflow.Timer) {
			if !tm.IsReady() {
				got[name] = "waiting"
				return
			}
			v, err := tm.Get(ctx)
			require.Equal(t, struct{}{}, v)
			got[name] = "ready, err " + errString(err)
		}
		now := workflow.NewTimer(ctx, 0)
		observe("zero", now)
		canceled := workflow.NewTimer(ctx, time.Minute)
		canceled.Cancel()
		observe("canceled", canceled)
		later := workflow.NewTimer(ctx, time.Hour)
		observe("before firing", later)
		_, err := later.Get(ctx)
		require.NoError(t, err)
		observe("after firing", later)
		later.Cancel() // does nothing once fired
		observe("canceled after firing", later)
		return got, nil
	})
	start := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	require.Equal(t, []history.Attributes{
		history.TimerStarted{Seq: 1, FireAt: start.Add(time.Minute)},
		history.TimerCanceled{Seq: 1},
		history.TimerStarted{Seq: 2, FireAt: start.Add(time.Hour)},
	}, cmds, "a zero timer takes no sequence number and gives no command")
	require.JSONEq(t, `{
		"zero": "ready, err <nil>",
		"canceled": "ready, err canceled",
		"before firing": "waiting",
		"after firing": "ready, err <nil>",
		"canceled after firing": "ready, err <nil>"
	}`, r.result(r.deliver(history.TimerFired{Seq: 2})))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
