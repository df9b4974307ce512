package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

func TestApplicationErrorReachesTheCaller(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	details := declineDetails{Code: "51", Amount: 700}
	charge := func(ctx context.Context, amount int) (string, error) {
		return "", activity.NewApplicationError("card declined", "CardDeclined", details)
	}
	wf := func(ctx workflow.Context, amount int) (string, error) {
		_, err := workflow.ExecuteActivity(ctx, charge, amount).Get(ctx)
		return "", fmt.Errorf("pay %d: %w", amount, err)
	}
	retry := fastRetry(5)
	retry.NonRetryableErrorTypes = []string{"CardDeclined"}
	require.NoError(t, engine.RegisterActivity(e, charge, activity.Options{Name: "Charge", Retry: retry}))
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Pay"}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, wf, 700, engine.StartOptions{ID: "pay-1"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)
	require.Equal(t, "CardDeclined", we.Failure.Type, "the run failed with the activity's type: %+v", we.Failure)
	var app *activity.ApplicationError
	require.True(t, errors.As(err, &app), "errors.As finds the application error in what Result returns")
	var got declineDetails
	require.NoError(t, app.DetailsAs(&got))
	require.Equal(t, details, got)
	require.Contains(t, app.Message, "card declined")
}
