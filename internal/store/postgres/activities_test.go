package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// TestEnqueueJobWhilePendingJobFinishes: a job enqueued again while its key
// is taken, by a pending job that finishes between the insert that finds it
// and the read of its ID, is enqueued anew (its key is free again) instead
// of failing with "no rows". A caller retrying an Enqueue whose first try
// timed out after it committed meets exactly this (the ambiguous-commit test
// found it).
func TestEnqueueJobWhilePendingJobFinishes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, url := pgtest.PoolURL(t)
	finish := &finishAfterInsert{admin: admin}
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = finish
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := postgres.New(pool)

	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	job := store.EnqueueJobParams{Now: now, Task: store.NewActivityTask{
		Activity: "A", Queue: "q", Input: json.RawMessage(`1`), IdempotencyKey: "k", Lease: time.Minute, RunAfter: now,
	}}
	first, existing, err := s.EnqueueJob(ctx, job)
	require.NoError(t, err)
	require.False(t, existing)

	finish.armed.Store(true)
	second, existing, err := s.EnqueueJob(ctx, job)
	require.NoError(t, err)
	require.False(t, finish.armed.Load(), "the pending job finished after the insert found it")
	require.False(t, existing, "the pending job was gone: the key was free")
	require.NotEqual(t, first, second)
	var n int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM durable_activity_tasks WHERE idempotency_key = 'k'`).Scan(&n))
	require.Equal(t, 1, n)
}

// finishAfterInsert, once armed, deletes the job (as its completion does)
// right after the next job insert returns.
type finishAfterInsert struct {
	admin *pgxpool.Pool
	armed atomic.Bool
}

type insertKey struct{}

func (f *finishAfterInsert) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "INSERT INTO durable_activity_tasks (activity,") {
		return context.WithValue(ctx, insertKey{}, true)
	}
	return ctx
}

func (f *finishAfterInsert) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(insertKey{}) == nil || data.Err != nil || !f.armed.CompareAndSwap(true, false) {
		return
	}
	if _, err := f.admin.Exec(context.WithoutCancel(ctx), `DELETE FROM durable_activity_tasks WHERE idempotency_key = 'k'`); err != nil {
		panic(err)
	}
}
