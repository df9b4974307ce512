package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

func Unregistered(ctx workflow.Context, n int) (int, error) { return n, nil }

func TestUnknownWorkflowTypeWaitsVisiblyAndIsNotLost(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.PoolURL(t)
	e := newEngine(t, pool, engine.Options{})
	run(t, e) // knows no workflow
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, Unregistered, 7, engine.StartOptions{ID: "orphan"})
	require.NoError(t, err)
	// No worker has the type: the task waits, ready and unclaimed, which the
	// queue's oldest-ready age (metrics, durable stats) shows.
	var claimed *string
	var ready bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT locked_by, run_after <= now() FROM durable_workflow_tasks WHERE run_id = $1`, r.RunID).Scan(&claimed, &ready))
	require.Nil(t, claimed, "a worker claims only the types it has")
	require.True(t, ready)
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, engine.StatusRunning, info.Status, "the run waits")
	require.Zero(t, info.TaskAttempts)

	// A worker that has it picks the run up.
	e2 := newEngine(t, newPool(t, url), engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e2, Unregistered, engine.WorkflowOptions{}))
	run(t, e2)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, got)
}

func TestBadInputIsAClearErrorAndChangesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{MaxPayloadBytes: 1024})
	ctx := resultCtx(t)
	big := strings.Repeat("x", 2000)
	hostile := []struct {
		name, id, want string
	}{
		{"oversized payload", "ok-id", "over the 1024-byte limit"},
		{"oversized ID", strings.Repeat("i", 1001), "workflow ID is 1001 bytes, the limit is 1000"},
		{"NUL byte", "a\x00b", "contains a NUL byte"},
		{"invalid UTF-8", "a\xffb", "is not valid UTF-8"},
	}
	for _, tt := range hostile {
		input := "small"
		if tt.name == "oversized payload" {
			input = big
		}
		_, err := engine.Start(ctx, e, Echo, input, engine.StartOptions{ID: tt.id})
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	require.ErrorContains(t, engine.Signal(ctx, e, "x", "bad\x00name", 1), "contains a NUL byte")
	require.ErrorContains(t, engine.Signal(ctx, e, "x", "", 1), "empty signal name")
	_, err := engine.Enqueue(ctx, e, Noop, 1, engine.JobOptions{Key: "k\x00"})
	require.ErrorContains(t, err, "contains a NUL byte")

	err = engine.RegisterActivity(e, Noop, activity.Options{Name: "BadPolicy", Retry: activity.RetryPolicy{BackoffCoefficient: 0.5}})
	require.ErrorContains(t, err, "BackoffCoefficient 0.5 is below 1")
	err = engine.RegisterActivity(e, Noop, activity.Options{Name: "BadTimeout", StartToCloseTimeout: -time.Second})
	require.ErrorContains(t, err, "StartToCloseTimeout")
	_, err = engine.New(pool, engine.Options{Queues: map[string]engine.QueueOptions{"q\x00": {}}})
	require.ErrorContains(t, err, "NUL byte")

	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_runs) + (SELECT count(*) FROM durable_activity_tasks)`).Scan(&rows))
	require.Zero(t, rows, "nothing was written")
}

func Echo(_ workflow.Context, s string) (string, error) { return s, nil }

// TestHostileStringsAreParameters pushes strings that would break SQL built
// by hand through everything that reaches SQL: workflow IDs, type names,
// queues, signal names, job keys and filters.
func TestHostileStringsAreParameters(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres})
	ctx := resultCtx(t)
	hostile := []string{
		`'; DROP TABLE durable_runs; --`, `" OR 1=1 --`, `/* comment */`, `\`, `$1`, `%s%d`,
		"unicode: 日本語 🚀 Ωμέγα", strings.Repeat("long-", 190),
	}
	wf := func(ctx workflow.Context, s string) (string, error) {
		v, err := workflow.GetSignalChannel[string](ctx, s).Receive(ctx)
		return s + "|" + v, err
	}
	for i, h := range hostile {
		name := "Wf" + string(rune('A'+i))
		short := h[:min(len(h), 200)] // queue and signal names are at most 200 bytes
		e2, err := engine.New(env.Pool, engine.Options{Queues: map[string]engine.QueueOptions{short: {}}, NowFunc: env.Clock.Now, Logger: quietLogger()})
		require.NoError(t, err)
		require.NoError(t, engine.RegisterWorkflow(e2, wf, engine.WorkflowOptions{Name: name + h[:min(len(h), 100)], Queue: short}))
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e2.Run(runCtx) }()
		r, err := engine.Start(ctx, e2, wf, short, engine.StartOptions{ID: h})
		require.NoError(t, err, "start with ID %q", h)
		require.NoError(t, engine.Signal(ctx, e2, h, short, h))
		got, err := r.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, short+"|"+h, got)
		info, err := e2.Describe(ctx, h)
		require.NoError(t, err)
		require.Equal(t, h, info.WorkflowID)
		_, err = e2.DeadLetters(ctx, engine.DeadLetterFilter{Type: h, Kind: engine.DeadLetterKind(h)})
		require.NoError(t, err)
		_, err = engine.Enqueue(ctx, e2, Noop, 1, engine.JobOptions{Key: h, RunAfter: time.Hour})
		require.NoError(t, err)
		stop()
		require.NoError(t, <-done)
	}
	var runs int
	require.NoError(t, env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_runs WHERE status = 'completed'").Scan(&runs))
	require.Equal(t, len(hostile), runs, "every table is still there and every run completed")
}

func TestCorruptedHistoryFailsThatRunVisibly(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepHour, engine.WorkflowOptions{}))
	env.Run()
	ctx := resultCtx(t)
	bad, err := engine.Start(ctx, env.Engine, SleepHour, 0, engine.StartOptions{ID: "bad"})
	require.NoError(t, err)
	good, err := engine.Start(ctx, env.Engine, SleepHour, 0, engine.StartOptions{ID: "good"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers").Scan(&n) == nil && n == 2
	}, 10*time.Second, 5*time.Millisecond)
	// Someone edits a history row by hand.
	_, err = env.Pool.Exec(ctx, `UPDATE durable_events SET attributes = '{"bogus": true}' WHERE run_id = $1 AND event_id = 2`, bad.RunID)
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, time.Hour))

	_, err = good.Result(ctx)
	require.NoError(t, err, "the other runs carry on")
	var info engine.RunInfo
	require.Eventually(t, func() bool {
		info, err = bad.Describe(ctx)
		return err == nil && info.TaskError != ""
	}, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, info.TaskError, "event 2")
	require.Contains(t, info.TaskError, `unknown field "bogus"`)
	require.Equal(t, engine.StatusRunning, info.Status, "the run waits, visibly, for a fix")
}
