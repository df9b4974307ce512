package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
)

func TestApplicationErrorRoundTripsThroughFailures(t *testing.T) {
	t.Parallel()
	// An activity's failure, as the engine records it, reaches Get as both
	// an *ActivityError and an *activity.ApplicationError.
	recorded := history.Failure{Message: "card declined", Class: "CardDeclined", Attempts: 1,
		Type: "CardDeclined", NonRetryable: true, Details: json.RawMessage(`{"code":"51"}`)}
	err := activityFailure("Charge", recorded)
	var ae *ActivityError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, ActivityError{Activity: "Charge", Message: "card declined", Class: "CardDeclined", Attempts: 1}, *ae)
	require.Equal(t, ae.Error(), err.Error())
	var app *activity.ApplicationError
	require.ErrorAs(t, err, &app)
	require.Equal(t, activity.ApplicationError{Message: "card declined", Type: "CardDeclined", NonRetryable: true,
		Details: json.RawMessage(`{"code":"51"}`)}, *app)

	// A workflow that returns it closes with its type and details.
	f := failureOf(fmt.Errorf("pay: %w", err))
	require.Equal(t, history.Failure{Message: "pay: activity Charge failed after 1 attempt(s) (CardDeclined): card declined",
		Class: "activity", Type: "CardDeclined", NonRetryable: true, Details: json.RawMessage(`{"code":"51"}`)}, f)

	plain := activityFailure("Charge", history.Failure{Message: "boom", Class: "*errors.errorString", Attempts: 3})
	require.False(t, errors.As(plain, &app), "a failure without a type holds no application error")
	require.Equal(t, history.Failure{Message: "boom", Class: "*errors.errorString"}, failureOf(errors.New("boom")))
}
