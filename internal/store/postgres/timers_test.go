package postgres_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// A fire time finer than Postgres's microseconds is rounded up, never down:
// a timer does not fire before its time, not even by a nanosecond.
func TestTimerNeverFiresBeforeItsNanosecond(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "wf", WorkflowType: "T", Queue: "q", Input: json.RawMessage(`1`), Now: base,
	})
	require.NoError(t, err)
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: base, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	due := base.Add(time.Microsecond + 500*time.Nanosecond)
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: tasks[0].Token, ProcessedEventID: 1, Now: base,
		Events: []history.Attributes{history.TimerStarted{Seq: 1, FireAt: due}},
		Timers: []store.NewTimer{{Seq: 1, FireAt: due}},
	})
	require.NoError(t, err)

	// A nanosecond before the due time: the same microsecond.
	fired, err := s.FireTimers(ctx, due.Add(-time.Nanosecond), 10)
	require.NoError(t, err)
	require.Zero(t, fired.Count, "fired before its time")
	fired, err = s.FireTimers(ctx, base.Add(2*time.Microsecond), 10)
	require.NoError(t, err)
	require.Equal(t, 1, fired.Count)
}
