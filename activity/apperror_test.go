package activity_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
)

func TestApplicationErrorClassAndRetryability(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("charge: %w", activity.NewApplicationError("card declined", "CardDeclined", map[string]string{"code": "51"}))
	require.Equal(t, "charge: card declined", err.Error())
	require.Equal(t, "CardDeclined", activity.ErrorClass(err), "the type is the class NonRetryableErrorTypes names")
	require.False(t, activity.IsNonRetryable(err))
	var app *activity.ApplicationError
	require.ErrorAs(t, err, &app)
	var d map[string]string
	require.NoError(t, app.DetailsAs(&d))
	require.Equal(t, map[string]string{"code": "51"}, d)

	nr := activity.NewNonRetryableApplicationError("gone", "", nil)
	require.True(t, activity.IsNonRetryable(nr))
	require.Equal(t, "application", activity.ErrorClass(nr), "an application error without a type")
	require.ErrorContains(t, nr.(*activity.ApplicationError).DetailsAs(&d), "no details")

	require.True(t, activity.IsNonRetryable(activity.Permanent(errors.New("x"))))
	require.Equal(t, "permanent", activity.ErrorClass(activity.Permanent(nr)), "Permanent names the class first")
}

func TestApplicationErrorDropsDetailsItCannotStore(t *testing.T) {
	t.Parallel()
	bad := activity.NewApplicationError("m", "T", func() {}).(*activity.ApplicationError)
	require.Nil(t, bad.Details)
	require.Contains(t, bad.Message, "details dropped")
	nul := activity.NewApplicationError("m", "T", "a\x00b").(*activity.ApplicationError)
	require.Nil(t, nul.Details)
	require.Contains(t, nul.Message, "NUL")
}

func TestLoggerCarriesTheAttemptsAttributes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	ctx := activity.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)))
	activity.Logger(ctx).Info("no info")
	require.Contains(t, buf.String(), "msg=\"no info\"\n", "no attributes outside an attempt")

	buf.Reset()
	ctx = activity.NewContext(ctx, activity.Info{Name: "Charge", Attempt: 2, RunID: "r1", WorkflowID: "w1", IdempotencyKey: "k1"})
	activity.Logger(ctx).Info("charging")
	require.Contains(t, buf.String(), "msg=charging activity=Charge attempt=2 run_id=r1 workflow_id=w1 idempotency_key=k1")

	require.NotNil(t, activity.Logger(context.Background()), "slog.Default outside an engine")
}
