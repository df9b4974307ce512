package activity_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/actctx"
)

func TestGetInfoWithoutActivityContext(t *testing.T) {
	t.Parallel()

	require.Equal(t, activity.Info{}, activity.GetInfo(t.Context()))
}

func TestNewContext(t *testing.T) {
	t.Parallel()

	info := activity.Info{
		Name:             "charge",
		IdempotencyKey:   "run-1/7",
		Attempt:          3,
		Queue:            "payments",
		WorkflowID:       "order-7",
		RunID:            "run-1",
		Deadline:         time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		HeartbeatDetails: []byte(`{"page":4}`),
	}
	parent, cancel := context.WithCancel(t.Context())
	ctx := activity.NewContext(parent, info)
	require.Equal(t, info, activity.GetInfo(ctx))

	_, hasDeadline := ctx.Deadline()
	require.False(t, hasDeadline, "NewContext sets no context deadline")

	child := context.WithValue(ctx, struct{}{}, "x")
	require.Equal(t, info, activity.GetInfo(child), "visible from derived contexts")

	next := activity.NewContext(ctx, activity.Info{Name: "charge", Attempt: 4})
	require.Equal(t, 4, activity.GetInfo(next).Attempt, "the innermost Info wins")
	require.Equal(t, 3, activity.GetInfo(ctx).Attempt, "the parent is unchanged")

	cancel()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "cancellation of the parent passes through")
}

func TestRecordHeartbeatWithoutFunc(t *testing.T) {
	t.Parallel()

	require.NoError(t, activity.RecordHeartbeat(t.Context(), map[string]int{"page": 4}))
	require.NoError(t, activity.RecordHeartbeat(t.Context(), nil))

	err := activity.RecordHeartbeat(t.Context(), make(chan int))
	require.ErrorContains(t, err, "record heartbeat: encode details: json: unsupported type: chan int",
		"details are encoded even without an engine, so unit tests catch them")
	var typeErr *json.UnsupportedTypeError
	require.ErrorAs(t, err, &typeErr)
}

func TestRecordHeartbeatCallsFunc(t *testing.T) {
	t.Parallel()

	type progress struct {
		Page int `json:"page"`
	}
	type call struct {
		ctx     context.Context
		details string
	}
	var calls []call
	ctx := actctx.WithHeartbeatFunc(t.Context(), func(ctx context.Context, details []byte) error {
		calls = append(calls, call{ctx: ctx, details: string(details)})
		return nil
	})
	ctx = activity.NewContext(ctx, activity.Info{Name: "crawl", Attempt: 1})

	require.NoError(t, activity.RecordHeartbeat(ctx, progress{Page: 4}))
	require.NoError(t, activity.RecordHeartbeat(ctx, nil))
	require.Len(t, calls, 2)
	require.JSONEq(t, `{"page":4}`, calls[0].details)
	require.Equal(t, "null", calls[1].details)
	require.Equal(t, "crawl", activity.GetInfo(calls[0].ctx).Name, "fn gets the ctx passed to RecordHeartbeat")

	err := activity.RecordHeartbeat(ctx, func() {})
	require.ErrorContains(t, err, "record heartbeat: encode details")
	require.Len(t, calls, 2, "fn is not called when encoding fails")
}

func TestRecordHeartbeatRefused(t *testing.T) {
	t.Parallel()

	errLeaseLost := errors.New("lease lost")
	ctx := actctx.WithHeartbeatFunc(t.Context(), func(context.Context, []byte) error {
		return errLeaseLost
	})
	err := activity.RecordHeartbeat(ctx, 1)
	require.ErrorIs(t, err, errLeaseLost)
	require.EqualError(t, err, "record heartbeat: lease lost")
}

func TestRecordHeartbeatNilFuncRemoves(t *testing.T) {
	t.Parallel()

	ctx := actctx.WithHeartbeatFunc(t.Context(), func(context.Context, []byte) error {
		return errors.New("refused")
	})
	require.Error(t, activity.RecordHeartbeat(ctx, 1))
	require.NoError(t, activity.RecordHeartbeat(actctx.WithHeartbeatFunc(ctx, nil), 1))
}

func TestRecordHeartbeatConcurrent(t *testing.T) {
	t.Parallel()

	got := make(chan string, 16)
	ctx := actctx.WithHeartbeatFunc(t.Context(), func(_ context.Context, details []byte) error {
		got <- string(details)
		return nil
	})
	done := make(chan error, 16)
	for i := range 16 {
		go func() { done <- activity.RecordHeartbeat(ctx, i) }()
	}
	seen := make(map[string]bool)
	for range 16 {
		require.NoError(t, <-done)
		seen[<-got] = true
	}
	require.Len(t, seen, 16)
}
