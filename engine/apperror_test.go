package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

type declineDetails struct {
	Code   string `json:"code"`
	Amount int    `json:"amount"`
}

// appErrorSeen is what a workflow read from the error of a failed activity.
type appErrorSeen struct {
	Type         string
	NonRetryable bool
	Details      declineDetails
	Activity     string
	Attempts     int
	Class        string
}

// appErrorWorkflow runs charge and reports what its error carried.
func appErrorWorkflow(charge func(context.Context, int) (string, error)) func(workflow.Context, int) (appErrorSeen, error) {
	return func(ctx workflow.Context, amount int) (appErrorSeen, error) {
		_, err := workflow.ExecuteActivity(ctx, charge, amount).Get(ctx)
		var seen appErrorSeen
		var app *activity.ApplicationError
		if !errors.As(err, &app) {
			return seen, fmt.Errorf("want an *activity.ApplicationError from Get, got %T: %v", err, err)
		}
		var ae *workflow.ActivityError
		if !errors.As(err, &ae) {
			return seen, fmt.Errorf("want a *workflow.ActivityError from Get, got %T: %v", err, err)
		}
		seen.Type, seen.NonRetryable, seen.Activity, seen.Attempts, seen.Class = app.Type, app.NonRetryable, ae.Activity, ae.Attempts, ae.Class
		if err := app.DetailsAs(&seen.Details); err != nil {
			return seen, err
		}
		return seen, nil
	}
}

func TestApplicationErrorReachesTheWorkflow(t *testing.T) {
	t.Parallel()
	details := declineDetails{Code: "51", Amount: 700}
	for _, c := range []struct {
		name, typ    string
		nonRetryable bool
		listed       []string // RetryPolicy.NonRetryableErrorTypes
		attempts     int
	}{
		{name: "NonRetryable", typ: "CardDeclined", nonRetryable: true, attempts: 1},
		{name: "TypeListedAsNonRetryable", typ: "Fatal", listed: []string{"Other", "Fatal"}, attempts: 1},
		{name: "TypeNotListed", typ: "Flaky", listed: []string{"Fatal"}, attempts: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			e := newEngine(t, pool, engine.Options{})
			var calls atomic.Int32
			charge := func(ctx context.Context, amount int) (string, error) {
				calls.Add(1)
				if c.nonRetryable {
					return "", activity.NewNonRetryableApplicationError("card declined", c.typ, details)
				}
				return "", fmt.Errorf("charge %d: %w", amount, activity.NewApplicationError("card declined", c.typ, details))
			}
			retry := fastRetry(3)
			retry.NonRetryableErrorTypes = c.listed
			wf := appErrorWorkflow(charge)
			require.NoError(t, engine.RegisterActivity(e, charge, activity.Options{Name: "Charge", Retry: retry}))
			require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Pay"}))
			run(t, e)
			ctx := resultCtx(t)
			r, err := engine.Start(ctx, e, wf, 700, engine.StartOptions{ID: "pay-1"})
			require.NoError(t, err)
			seen, err := r.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, appErrorSeen{
				Type: c.typ, NonRetryable: c.nonRetryable, Details: details,
				Activity: "Charge", Attempts: c.attempts, Class: c.typ,
			}, seen)
			require.Equal(t, int32(c.attempts), calls.Load(), "attempts made")
		})
	}
}

func TestWorkflowErrorUnwrapsToApplicationError(t *testing.T) {
	t.Parallel()
	we := &engine.WorkflowError{WorkflowID: "pay-1", RunID: "r", Failure: history.Failure{
		Message: "card declined", Class: "activity", Type: "CardDeclined", NonRetryable: true, Details: json.RawMessage(`{"code":"51","amount":700}`),
	}}
	var app *activity.ApplicationError
	require.ErrorAs(t, fmt.Errorf("pay: %w", we), &app)
	require.Equal(t, "CardDeclined", app.Type)
	require.True(t, app.NonRetryable)
	var d declineDetails
	require.NoError(t, app.DetailsAs(&d))
	require.Equal(t, declineDetails{Code: "51", Amount: 700}, d)

	plain := &engine.WorkflowError{Failure: history.Failure{Message: "boom", Class: "*errors.errorString"}}
	require.NotErrorAs(t, plain, &app, "a failure without a type holds no application error")
}

func TestActivityLoggerAndInfo(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var logs syncbuf.Buffer
	e := newEngine(t, pool, engine.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	infos := make(chan activity.Info, 1)
	greet := func(ctx context.Context, name string) (string, error) {
		activity.Logger(ctx).Info("greeting", "name", name)
		infos <- activity.GetInfo(ctx)
		return "hello " + name, nil
	}
	wf := func(ctx workflow.Context, name string) (string, error) {
		return workflow.ExecuteActivity(ctx, greet, name).Get(ctx)
	}
	require.NoError(t, engine.RegisterActivity(e, greet, activity.Options{Name: "Greet"}))
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Hello"}))
	run(t, e)
	ctx := resultCtx(t)
	before := time.Now()
	r, err := engine.Start(ctx, e, wf, "ada", engine.StartOptions{ID: "hello-1"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.NoError(t, err)

	info := <-infos
	require.Equal(t, int64(1), info.Seq, "the workflow's first command")
	require.False(t, info.ScheduledTime.Before(before.Add(-time.Second)), "scheduled at %v, started the run at %v", info.ScheduledTime, before)
	require.False(t, info.StartedTime.Before(info.ScheduledTime), "started %v before scheduled %v", info.StartedTime, info.ScheduledTime)

	var line map[string]any
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"greeting"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.NotNil(t, line, "the activity's log line reaches the engine's logger: %s", logs.String())
	require.Equal(t, "ada", line["name"])
	require.Equal(t, "Greet", line["activity"])
	require.EqualValues(t, 1, line["attempt"])
	require.Equal(t, r.RunID, line["run_id"])
	require.Equal(t, "hello-1", line["workflow_id"])
	require.Equal(t, info.IdempotencyKey, line["idempotency_key"])
	require.NotEmpty(t, info.IdempotencyKey)
}
