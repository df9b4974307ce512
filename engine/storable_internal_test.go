package engine

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
)

// refuseResults is storage that refuses every activity result as the
// database refuses a value it cannot hold.
type refuseResults struct{ store.Store }

func (s refuseResults) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	if _, ok := in.Event.(history.ActivityCompleted); ok {
		return store.Ready{}, fmt.Errorf("resolve activity task %d: %w: invalid byte sequence for encoding \"UTF8\" (SQLSTATE 22021)", in.TaskID, store.ErrUnstorable)
	}
	return s.Store.ResolveActivity(ctx, in)
}

func answer(context.Context, int) (int, error) { return 42, nil }

// TestUnstorableResultFailsTheActivity: a result the database refuses for
// what it holds fails the activity for good with the reason; it is not
// left to run again at the end of every lease.
func TestUnstorableResultFailsTheActivity(t *testing.T) {
	t.Parallel()
	e, err := newOnPool(pgtest.Pool(t), Options{
		Logger: slog.New(slog.DiscardHandler), PollInterval: 100 * time.Millisecond}, func(s store.Store) store.Store { return refuseResults{s} })
	require.NoError(t, err)
	require.NoError(t, RegisterActivity(e, answer, activity.Options{StartToCloseTimeout: time.Second}))
	runUntilTestEnds(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Enqueue(ctx, e, answer, 1, JobOptions{Key: "answer"})
	require.NoError(t, err)
	var dead []DeadLetter
	require.Eventually(t, func() bool {
		dead, err = e.DeadLetters(ctx, DeadLetterFilter{})
		return err == nil && len(dead) == 1
	}, 10*time.Second, 10*time.Millisecond, "the job fails for good")
	require.Contains(t, dead[0].LastError, "record result of activity answer")
	require.Contains(t, dead[0].LastError, "SQLSTATE 22021")
	require.Equal(t, 1, dead[0].Attempts, "one attempt: the same result would be refused again")
}
