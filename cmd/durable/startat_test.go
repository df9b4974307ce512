package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestDescribeShowsDelayedStart: describe prints when a delayed start runs
// its code (#37).
func TestDescribeShowsDelayedStart(t *testing.T) {
	t.Parallel()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, Nap, engine.WorkflowOptions{}))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	startAt := time.Now().Add(time.Hour).Truncate(time.Second)
	_, err = engine.Start(ctx, e, Nap, 0, engine.StartOptions{ID: "delayed-1", StartAt: startAt})
	require.NoError(t, err)

	r := durable(t, db, "workflow", "describe", "delayed-1")
	requireCode(t, exitOK, r)
	require.Regexp(t, `(?m)^Start at\s+\S+.*\(in (1h0m0s|59m\d+s); delayed start: its code has not run\)$`, r.stdout)

	r = durable(t, db, "--json", "workflow", "describe", "delayed-1")
	requireCode(t, exitOK, r)
	var out describeOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.NotNil(t, out.StartAt)
	require.True(t, out.StartAt.Equal(startAt), "start_at %v, want %v", out.StartAt, startAt)
}
