package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// TestActivityComplete completes pending activities with the CLI, by token
// and by workflow and activity ID, and checks that a second completion
// exits 3.
func TestActivityComplete(t *testing.T) {
	t.Parallel()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{Logger: slog.New(slog.DiscardHandler), PollInterval: time.Second})
	require.NoError(t, err)
	activityComplete(t, e, db)
}

// activityComplete registers an Expense workflow on e, whose activity
// waits for its result, runs e until the test ends, and completes its
// activities with the CLI on database db, where e is.
func activityComplete(t *testing.T, e *engine.Engine, db string) {
	t.Helper()
	tokens := make(chan []byte, 4)
	requestApproval := func(ctx context.Context, _ int) (string, error) {
		tokens <- activity.GetInfo(ctx).TaskToken
		return "", activity.ErrResultPending
	}
	wf := func(ctx workflow.Context, n int) (string, error) {
		return workflow.ExecuteActivity(ctx, requestApproval, n).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Expense"}))
	require.NoError(t, engine.RegisterActivity(e, requestApproval, activity.Options{Name: "RequestApproval"}))
	runEngine(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	byToken, err := engine.Start(ctx, e, wf, 1, engine.StartOptions{ID: "expense-1"})
	require.NoError(t, err)
	var token []byte
	select {
	case token = <-tokens:
	case <-ctx.Done():
		t.Fatal("the activity did not start")
	}
	r := durable(t, db, "activity", "complete", "--token", string(token), "--result", `"approved"`)
	requireCode(t, exitOK, r)
	require.Contains(t, r.stdout, "completed")
	got, err := byToken.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "approved", got)
	r = durable(t, db, "activity", "complete", "--token", string(token), "--result", `"again"`)
	requireCode(t, exitNotFound, r)
	require.Contains(t, r.stderr, "activity attempt not found")

	byID, err := engine.Start(ctx, e, wf, 2, engine.StartOptions{ID: "expense-2"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := byID.Describe(ctx)
		return err == nil && len(info.PendingActivities) == 1 && info.PendingActivities[0].Running
	}, 30*time.Second, 10*time.Millisecond, "the activity's attempt waits for its result")
	r = durable(t, db, "--json", "activity", "complete", "--workflow-id", "expense-2", "--activity-id", "1", "--result", `"by id"`)
	requireCode(t, exitOK, r)
	require.JSONEq(t, `{"done": "complete", "workflow_id": "expense-2", "activity_id": 1}`, r.stdout)
	got, err = byID.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "by id", got)
	requireCode(t, exitNotFound, durable(t, db, "activity", "fail", "--workflow-id", "no-such", "--activity-id", "1", "--message", "x"))
}

func TestActivityUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"NoTarget", []string{"activity", "complete"}, "name the activity"},
		{"Both", []string{"activity", "complete", "--token", "dt1.x", "--workflow-id", "w", "--activity-id", "1"}, "not both"},
		{"BadResult", []string{"activity", "complete", "--token", "dt1.x", "--result", "yes"}, "--result is not valid JSON"},
		{"NoMessage", []string{"activity", "fail", "--token", "dt1.x"}, "--message must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := durable(t, "", tt.args...)
			requireCode(t, exitUsage, r)
			require.Contains(t, r.stderr, tt.want)
		})
	}
}
