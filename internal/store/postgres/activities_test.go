package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
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
	f.finish(ctx)
}

func (f *finishAfterInsert) finish(ctx context.Context) {
	if _, err := f.admin.Exec(context.WithoutCancel(ctx), `DELETE FROM durable_activity_tasks WHERE idempotency_key = 'k'`); err != nil {
		panic(err)
	}
}

// The store sends its statements in batches (with the planner's settings).

func (f *finishAfterInsert) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (f *finishAfterInsert) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if strings.Contains(data.SQL, "INSERT INTO durable_activity_tasks (activity,") && data.Err == nil && f.armed.CompareAndSwap(true, false) {
		f.finish(ctx)
	}
}

func (f *finishAfterInsert) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A claim takes the ready tasks it prefers first, then the queue's oldest;
// a preferred task that is not ready (claimed already) or does not exist is
// passed over.
func TestClaimTakesPreferredActivitiesFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	runs := make([]string, 4)
	for i := range runs { // run i's activity is ready i ms after now
		runs[i] = runWithActivity(t, s, fmt.Sprintf("wf-%d", i), now, now.Add(time.Duration(i)*time.Millisecond))
	}
	claim := func(prefer ...store.ActivityKey) []string {
		tasks, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 2,
			Now: now.Add(time.Second), Prefer: prefer})
		require.NoError(t, err)
		var got []string
		for _, a := range tasks {
			got = append(got, a.RunID)
		}
		return got
	}
	require.ElementsMatch(t, []string{runs[2], runs[0]}, claim(store.ActivityKey{RunID: runs[2], Seq: 1},
		store.ActivityKey{RunID: uuid.NewString(), Seq: 1}), "the preferred one, then the oldest")
	require.ElementsMatch(t, []string{runs[1], runs[3]}, claim(store.ActivityKey{RunID: runs[2], Seq: 1}),
		"the preferred one is claimed already: the oldest two")
	require.Empty(t, claim())
}

// An activity written ready later than it was scheduled (an engine's
// backlog, held back from the others) is claimed early only by a claim that
// names it and allows it (PreferEarly), and only if it was never tried: a
// retry waits for its backoff whoever names it.
func TestPreferredActivitiesMayBeClaimedEarly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	held := runWithActivity(t, s, "held", now, now.Add(time.Second))
	retried := runWithActivity(t, s, "retried", now, now)
	claim := func(at time.Time, early time.Duration, prefer ...string) []string {
		t.Helper()
		var keys []store.ActivityKey
		for _, r := range prefer {
			keys = append(keys, store.ActivityKey{RunID: r, Seq: 1})
		}
		tasks, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 2,
			Now: at, Prefer: keys, PreferEarly: early})
		require.NoError(t, err)
		var got []string
		for _, a := range tasks {
			got = append(got, a.RunID)
		}
		return got
	}
	tasks, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 2, Now: now})
	require.NoError(t, err)
	require.Len(t, tasks, 1, "the held one is not ready yet")
	require.Equal(t, retried, tasks[0].RunID)
	require.NoError(t, s.RetryActivity(ctx, store.RetryActivityParams{TaskID: tasks[0].ID, Attempt: 1,
		RunAfter: now.Add(500 * time.Millisecond), Error: "boom", Now: now}))

	require.Empty(t, claim(now, 0, held), "named, but not allowed early")
	require.Empty(t, claim(now, time.Second, retried), "a retry is not claimed before its backoff")
	require.Equal(t, []string{held}, claim(now, time.Second, held, retried), "the never-tried one, named, early")
	require.Equal(t, []string{retried}, claim(now.Add(500*time.Millisecond), 0), "the retry when due")
}

// A claim with OldestFirst takes one of the queue's oldest ready tasks
// before the preferred ones; when there is none, it takes the preferred
// ones all the same, held ones included, and leaves no slot empty.
func TestOldestFirstTakesTheQueuesOldestBeforeThePreferred(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := postgres.New(pgtest.Pool(t))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	oldest := runWithActivity(t, s, "oldest", now, now)
	preferred := runWithActivity(t, s, "preferred", now, now.Add(time.Millisecond))
	held := runWithActivity(t, s, "held", now, now.Add(time.Hour))
	claim := func(limit int, prefer ...string) []string {
		t.Helper()
		var keys []store.ActivityKey
		for _, r := range prefer {
			keys = append(keys, store.ActivityKey{RunID: r, Seq: 1})
		}
		tasks, err := s.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: limit,
			Now: now.Add(time.Second), Prefer: keys, PreferEarly: time.Hour, OldestFirst: true})
		require.NoError(t, err)
		var got []string
		for _, a := range tasks {
			got = append(got, a.RunID)
		}
		return got
	}
	require.Equal(t, []string{oldest}, claim(1, preferred), "the queue's oldest, ahead of the preferred one")
	require.Equal(t, []string{preferred, held}, claim(2, held), "the oldest ready one, then the preferred held one")
	held2 := runWithActivity(t, s, "held-2", now, now.Add(time.Hour))
	require.Equal(t, []string{held2}, claim(1, held2), "nothing else is ready: the one slot takes the preferred one")
	require.Empty(t, claim(1, held), "all claimed")
}

// runWithActivity starts a run whose first task schedules activity 1 on
// queue q, ready at readyAt, and returns the run's ID.
func runWithActivity(t *testing.T, s *postgres.Store, workflowID string, now, readyAt time.Time) string {
	t.Helper()
	ctx := t.Context()
	run, err := s.CreateRun(ctx, store.CreateRunParams{RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "T",
		Queue: "q", Input: json.RawMessage(`1`), Now: now})
	require.NoError(t, err)
	wts, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, wts, 1)
	require.Equal(t, run.RunID, wts[0].RunID)
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: wts[0].Token, ProcessedEventID: 1, Now: now,
		Events: []history.Attributes{history.ActivityScheduled{Seq: 1, Activity: "A", Queue: "q"}},
		Activities: []store.NewActivityTask{{Seq: 1, Activity: "A", Queue: "q", IdempotencyKey: run.RunID + ":1",
			Lease: time.Minute, RunAfter: readyAt}},
	})
	require.NoError(t, err)
	return run.RunID
}
