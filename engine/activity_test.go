package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// jobCounter counts the attempts of a job-like activity and can be told to
// start succeeding (the fix shipping).
type jobCounter struct {
	attempts atomic.Int32
	fixed    atomic.Bool
	err      error
}

func (j *jobCounter) Run(ctx context.Context, order int) (string, error) {
	j.attempts.Add(1)
	if !j.fixed.Load() {
		return "", j.err
	}
	return fmt.Sprintf("order %d done", order), nil
}

func fastRetry(max int) activity.RetryPolicy {
	return activity.RetryPolicy{InitialInterval: time.Millisecond, MaximumInterval: 5 * time.Millisecond, MaximumAttempts: max}
}

func waitDeadLetter(t *testing.T, e *engine.Engine, kind engine.DeadLetterKind) engine.DeadLetter {
	t.Helper()
	var ds []engine.DeadLetter
	require.Eventually(t, func() bool {
		var err error
		ds, err = e.DeadLetters(context.Background(), engine.DeadLetterFilter{Kind: kind, Pending: true})
		return err == nil && len(ds) > 0
	}, 20*time.Second, 5*time.Millisecond, "a %s lands in the dead-letter table", kind)
	require.Len(t, ds, 1)
	return ds[0]
}

func TestPermanentErrorDeadLettersAfterOneAttempt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	job := &jobCounter{err: activity.Permanent(errors.New("invalid address"))}
	require.NoError(t, engine.RegisterActivity(e, job.Run, activity.Options{Name: "Ship", Retry: fastRetry(10)}))
	run(t, e)
	ctx := resultCtx(t)
	j, err := engine.Enqueue(ctx, e, job.Run, 42, engine.JobOptions{Key: "ship-42"})
	require.NoError(t, err)

	d := waitDeadLetter(t, e, engine.DeadJob)
	require.Equal(t, int32(1), job.attempts.Load(), "a permanent error is not retried")
	require.Equal(t, "Ship", d.Type)
	require.Equal(t, "ship-42", d.IdempotencyKey)
	require.JSONEq(t, "42", string(d.Payload))
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, "invalid address", d.LastError)
	require.Equal(t, "permanent", d.ErrorClass)
	require.Equal(t, "default", d.Queue)
	require.False(t, d.FirstFailedAt.IsZero())
	require.False(t, d.DeadLetteredAt.IsZero())
	require.NotZero(t, j.ID)
}

func TestExhaustedRetriesDeadLetterThenRedrive(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	job := &jobCounter{err: errors.New("gateway timeout")}
	require.NoError(t, engine.RegisterActivity(e, job.Run, activity.Options{Name: "Ship", Retry: fastRetry(4)}))
	run(t, e)
	ctx := resultCtx(t)
	_, err := engine.Enqueue(ctx, e, job.Run, 7, engine.JobOptions{Key: "ship-7"})
	require.NoError(t, err)

	d := waitDeadLetter(t, e, engine.DeadJob)
	require.Equal(t, int32(4), job.attempts.Load())
	require.Equal(t, 4, d.Attempts)
	require.Equal(t, "gateway timeout", d.LastError)
	require.Equal(t, "*errors.errorString", d.ErrorClass)
	require.True(t, d.FirstFailedAt.Before(d.DeadLetteredAt) || d.FirstFailedAt.Equal(d.DeadLetteredAt))

	job.fixed.Store(true)
	res, err := e.Redrive(ctx, d.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	require.Eventually(t, func() bool { return job.attempts.Load() == 5 }, 20*time.Second, 5*time.Millisecond,
		"the redriven job runs again, with a fresh budget")
	again, err := e.Redrive(ctx, d.ID)
	require.NoError(t, err)
	require.False(t, again.Redriven, "redriving twice is harmless")
	require.Eventually(t, func() bool {
		var n int
		return pool.QueryRow(ctx, "SELECT count(*) FROM durable_activity_tasks").Scan(&n) == nil && n == 0
	}, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, int32(5), job.attempts.Load(), "and only once")
}

func TestRateLimitedWaitsForRetryAfterWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	var calls atomic.Int32
	limited := func(ctx context.Context, _ int) (int, error) {
		if calls.Add(1) <= 3 {
			return 0, activity.RateLimited(errors.New("429 too many requests"), time.Hour)
		}
		return activity.GetInfo(ctx).Attempt, nil
	}
	require.NoError(t, engine.RegisterActivity(env.Engine, limited, activity.Options{Name: "CallAPI", Retry: activity.RetryPolicy{MaximumAttempts: 2}}))
	env.Run()
	ctx := resultCtx(t)
	start := env.Clock.Now()
	_, err := engine.Enqueue(ctx, env.Engine, limited, 1, engine.JobOptions{Key: "api"})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		require.Eventually(t, func() bool { return calls.Load() == int32(i) }, 20*time.Second, 2*time.Millisecond)
		var runAfter time.Time
		var maxAttempts, rateLimited int
		require.Eventually(t, func() bool {
			err := env.Pool.QueryRow(ctx, "SELECT run_after, max_attempts, rate_limited FROM durable_activity_tasks WHERE idempotency_key = 'api' AND locked_by IS NULL").
				Scan(&runAfter, &maxAttempts, &rateLimited)
			return err == nil && rateLimited == i
		}, 20*time.Second, 2*time.Millisecond)
		require.False(t, runAfter.Before(env.Clock.Now().Add(time.Hour)), "retried at their time, not ours")
		require.Equal(t, 2+i, maxAttempts, "a rate-limited retry does not spend the fault budget")
		require.NoError(t, env.Advance(ctx, time.Hour))
	}
	require.Eventually(t, func() bool { return calls.Load() == 4 }, 20*time.Second, 2*time.Millisecond,
		"the fourth attempt runs although MaximumAttempts is 2")
	require.GreaterOrEqual(t, env.Clock.Now().Sub(start), 3*time.Hour)
}

func TestEnqueueTxRollbackEnqueuesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	var sent atomic.Int32
	sendReceipt := func(_ context.Context, orderID int64) (bool, error) { sent.Add(1); return true, nil }
	require.NoError(t, engine.RegisterActivity(e, sendReceipt, activity.Options{Name: "SendReceipt"}))
	ctx := resultCtx(t)
	_, err := pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, sku text NOT NULL);
		CREATE TABLE inventory (sku text PRIMARY KEY, n int NOT NULL CHECK (n >= 0));
		INSERT INTO inventory VALUES ('widget', 0)`)
	require.NoError(t, err)

	// The seed's broken example: the order and its job, then a write that
	// throws. With EnqueueTx the job rolls back with the order.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (1, 'widget')"); err != nil {
			return err
		}
		if _, err := engine.EnqueueTx(ctx, e, tx, sendReceipt, int64(1), engine.JobOptions{Key: "receipt-1"}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE inventory SET n = n - 1 WHERE sku = 'widget'") // out of stock: throws
		return err
	})
	require.ErrorContains(t, err, "inventory_n_check")

	// A committed order gets its job.
	_, err = pool.Exec(ctx, "UPDATE inventory SET n = 1")
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (2, 'widget')"); err != nil {
			return err
		}
		if _, err := engine.EnqueueTx(ctx, e, tx, sendReceipt, int64(2), engine.JobOptions{Key: "receipt-2"}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE inventory SET n = n - 1 WHERE sku = 'widget'")
		return err
	})
	require.NoError(t, err)
	var keys []string
	rows, err := pool.Query(ctx, "SELECT idempotency_key FROM durable_activity_tasks ORDER BY 1")
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"receipt-2"}, keys, "the rolled-back order enqueued nothing")

	run(t, e)
	require.Eventually(t, func() bool { return sent.Load() == 1 }, 20*time.Second, 5*time.Millisecond)
	again, err := engine.Enqueue(ctx, e, sendReceipt, int64(3), engine.JobOptions{Key: "receipt-3", RunAfter: time.Hour})
	require.NoError(t, err)
	dup, err := engine.Enqueue(ctx, e, sendReceipt, int64(3), engine.JobOptions{Key: "receipt-3"})
	require.NoError(t, err)
	require.True(t, dup.Existing, "enqueuing a pending key returns the pending job")
	require.Equal(t, again.ID, dup.ID)
	require.Equal(t, int32(1), sent.Load(), "the delayed job has not run")
}

func TestLeaseExpiryLeadsToOneMoreAttemptAndOneCompletion(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{ManualClock: true})
	release := make(chan struct{})
	var attempts, completions atomic.Int32
	stuck := func(ctx context.Context, _ int) (int, error) {
		n := attempts.Add(1)
		if n == 1 {
			select { // the first worker stalls past its lease
			case <-release:
			case <-ctx.Done(): // the test failed: Run stops
			}
		}
		return int(n), nil
	}
	require.NoError(t, engine.RegisterActivity(env.Engine, stuck, activity.Options{Name: "Stuck", StartToCloseTimeout: time.Hour}))
	wf := func(ctx workflow.Context, in int) (int, error) {
		return workflow.ExecuteActivity(ctx, stuck, in).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(env.Engine, wf, engine.WorkflowOptions{Name: "UsesStuck"}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, wf, 0, engine.StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return attempts.Load() == 1 }, 20*time.Second, 2*time.Millisecond)
	// An activity may start before its schedule commits (it runs ahead of
	// it, when the run's first task was claimed from the queue): Describe
	// shows it once it has.
	var info engine.RunInfo
	require.Eventually(t, func() bool {
		info, err = r.Describe(ctx)
		return err == nil && len(info.PendingActivities) == 1
	}, 20*time.Second, 2*time.Millisecond, "Describe shows the running activity")
	require.Equal(t, "Stuck", info.PendingActivities[0].Activity)
	require.True(t, info.PendingActivities[0].Running)
	require.Equal(t, 1, info.PendingActivities[0].Attempts)

	require.NoError(t, env.Advance(ctx, time.Hour+time.Second)) // the lease runs out
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got, "the second attempt's result is recorded")
	close(release) // the zombie finishes; its completion must be refused
	require.Eventually(t, func() bool {
		events, err := r.History(ctx)
		if err != nil {
			return false
		}
		completions.Store(int32(countEvents(t, events, "activity_completed")))
		return true
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, int32(2), attempts.Load())
	require.Equal(t, int32(1), completions.Load(), "one completion in history")
}

func TestHeartbeatingActivityOutlivesItsLease(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	var attempts atomic.Int32
	var lastDetails sync.Map
	long := func(ctx context.Context, steps int) (int, error) {
		attempts.Add(1)
		for i := range steps {
			if err := activity.RecordHeartbeat(ctx, i); err != nil {
				return 0, err
			}
			lastDetails.Store("i", i)
			select {
			case <-time.After(30 * time.Millisecond): // the work of one step
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return steps, nil
	}
	// A 1s lease (the heartbeat timeout); the activity runs about 3s, three
	// leases. A 300ms lease was lost on a loaded CI machine, whose
	// heartbeat writes can wait that long: the job ran twice.
	require.NoError(t, engine.RegisterActivity(e, long, activity.Options{Name: "Long", HeartbeatTimeout: time.Second}))
	run(t, e)
	ctx := resultCtx(t)
	_, err := engine.Enqueue(ctx, e, long, 100, engine.JobOptions{Key: "long"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return pool.QueryRow(ctx, "SELECT count(*) FROM durable_activity_tasks").Scan(&n) == nil && n == 0
	}, 20*time.Second, 5*time.Millisecond, "the job completes")
	require.Equal(t, int32(1), attempts.Load(), "a heartbeating activity is not redelivered")
}

func TestHeartbeatTimeoutRetriesWithLastDetails(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	var resumedFrom atomic.Int32
	resumedFrom.Store(-1)
	var attempts atomic.Int32
	flaky := func(ctx context.Context, _ int) (int, error) {
		info := activity.GetInfo(ctx)
		if attempts.Add(1) == 1 {
			if err := activity.RecordHeartbeat(ctx, 7); err != nil {
				return 0, err
			}
			<-ctx.Done() // stops heartbeating: the heartbeat timeout cancels it
			return 0, ctx.Err()
		}
		var from int32
		if info.HeartbeatDetails != nil {
			_, _ = fmt.Sscan(string(info.HeartbeatDetails), &from)
		}
		resumedFrom.Store(from)
		return int(from), nil
	}
	require.NoError(t, engine.RegisterActivity(e, flaky, activity.Options{Name: "Flaky", HeartbeatTimeout: 500 * time.Millisecond, Retry: fastRetry(3)}))
	run(t, e)
	ctx := resultCtx(t)
	_, err := engine.Enqueue(ctx, e, flaky, 0, engine.JobOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return resumedFrom.Load() == 7 }, 20*time.Second, 5*time.Millisecond,
		"the second attempt gets the first attempt's last heartbeat details")
}

func TestExactlyOnceSurvivesACrashBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	ctx := resultCtx(t)
	_, err := pool.Exec(ctx, "CREATE TABLE shipments (order_id bigint NOT NULL)") // no unique key: duplicates would show
	require.NoError(t, err)
	var applied, attempts atomic.Int32
	ship := func(ctx context.Context, orderID int64) (string, error) {
		label, err := engine.ExactlyOnce(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			applied.Add(1)
			_, err := tx.Exec(ctx, "INSERT INTO shipments VALUES ($1)", orderID)
			return fmt.Sprintf("label-%d", orderID), err
		})
		if err != nil {
			return "", err
		}
		if attempts.Add(1) == 1 {
			return "", errors.New("crash after commit, before the ack") // the effect committed; the ack is lost
		}
		return label, nil
	}
	require.NoError(t, engine.RegisterActivity(e, ship, activity.Options{Name: "Ship", Retry: fastRetry(5)}))
	wf := func(ctx workflow.Context, id int64) (string, error) {
		return workflow.ExecuteActivity(ctx, ship, id).Get(ctx)
	}
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "ShipOrder"}))
	run(t, e)
	r, err := engine.Start(ctx, e, wf, 9, engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "label-9", got, "the second attempt returns the recorded result")
	require.Equal(t, int32(2), attempts.Load())
	require.Equal(t, int32(1), applied.Load(), "the effect ran once")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM shipments").Scan(&n))
	require.Equal(t, 1, n)

	_, err = engine.ExactlyOnce(ctx, pool, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
	require.ErrorIs(t, err, engine.ErrNoIdempotencyKey)
}

func TestBatchBackfillDoesNotDelayCriticalQueue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{Queues: map[string]engine.QueueOptions{
		"batch":    {ActivityConcurrency: 2, WorkflowConcurrency: 1},
		"critical": {ActivityConcurrency: 2, WorkflowConcurrency: 1},
	}})
	var batchDone atomic.Int32
	report := func(ctx context.Context, _ int) (int, error) {
		time.Sleep(2 * time.Millisecond) // the report's work
		batchDone.Add(1)
		return 0, nil
	}
	reset := make(chan struct{}, 1)
	passwordReset := func(_ context.Context, _ string) (bool, error) { reset <- struct{}{}; return true, nil }
	require.NoError(t, engine.RegisterActivity(e, report, activity.Options{Name: "Report", Queue: "batch"}))
	require.NoError(t, engine.RegisterActivity(e, passwordReset, activity.Options{Name: "PasswordReset", Queue: "critical"}))
	ctx := resultCtx(t)
	const backfill = 2000
	_, err := pool.Exec(ctx, `
		INSERT INTO durable_activity_tasks (activity, queue, input, idempotency_key, options, max_attempts, lease_ms, run_after, created_at)
		SELECT 'Report', 'batch', to_jsonb(g), 'report-' || g, '{"Queue":"batch"}', 10, 60000, now(), now()
		FROM generate_series(1, $1) g`, backfill)
	require.NoError(t, err)
	run(t, e)
	require.Eventually(t, func() bool { return batchDone.Load() > 10 }, 20*time.Second, time.Millisecond, "the backfill is running")
	t0 := time.Now()
	_, err = engine.Enqueue(ctx, e, passwordReset, "ada@example.com", engine.JobOptions{})
	require.NoError(t, err)
	select {
	case <-reset:
	case <-ctx.Done():
		t.Fatal("the critical job never ran")
	}
	waited := time.Since(t0)
	left := backfill - int(batchDone.Load())
	require.Greater(t, left, backfill/2, "the critical job ran while most of the backfill was still queued")
	t.Logf("critical job ran %s after enqueue, with %d batch jobs still queued", waited, left)
}

func TestRedriveFailedWorkflowResumesAtTheFailedActivity(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	var reserved atomic.Int32
	reserve := func(_ context.Context, sku string) (string, error) { reserved.Add(1); return "res-" + sku, nil }
	charge := &jobCounter{err: activity.Permanent(errors.New("payment provider down"))}
	wf := func(ctx workflow.Context, sku string) (string, error) {
		res, err := workflow.ExecuteActivity(ctx, reserve, sku).Get(ctx)
		if err != nil {
			return "", err
		}
		receipt, err := workflow.ExecuteActivity(ctx, charge.Run, 100).Get(ctx)
		if err != nil {
			return "", err
		}
		return res + " " + receipt, nil
	}
	require.NoError(t, engine.RegisterActivity(e, reserve, activity.Options{Name: "Reserve"}))
	require.NoError(t, engine.RegisterActivity(e, charge.Run, activity.Options{Name: "Charge"}))
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Order"}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, wf, "sku-1", engine.StartOptions{ID: "order-1"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	var we *engine.WorkflowError
	require.ErrorAs(t, err, &we)

	d := waitDeadLetter(t, e, engine.DeadWorkflow)
	require.Equal(t, "Order", d.Type)
	require.Equal(t, "order-1", d.WorkflowID)
	require.Equal(t, r.RunID, d.RunID)
	require.JSONEq(t, `"sku-1"`, string(d.Payload))
	require.Contains(t, d.LastError, "payment provider down")

	charge.fixed.Store(true) // the fix ships
	res, err := e.Redrive(ctx, d.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	require.NotEqual(t, r.RunID, res.RunID, "the run continues in a new run of the same workflow ID")
	again, err := engine.GetRun[string](ctx, e, "order-1")
	require.NoError(t, err)
	require.Equal(t, res.RunID, again.RunID)
	got, err := again.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "res-sku-1 order 100 done", got)
	require.Equal(t, int32(1), reserved.Load(), "the completed activity did not run again")
	require.Equal(t, int32(2), charge.attempts.Load(), "the failed activity ran again")

	twice, err := e.Redrive(ctx, d.ID)
	require.NoError(t, err)
	require.False(t, twice.Redriven)
	require.Equal(t, res.RunID, twice.RunID)
}

func TestRedriveAfterAHandledFailureDoesNotRerunLaterActivities(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	var notified atomic.Int32
	declined := func(context.Context, int) (int, error) { return 0, activity.Permanent(errors.New("declined")) }
	notify := func(context.Context, int) (int, error) { notified.Add(1); return 0, nil }
	wf := func(ctx workflow.Context, n int) (int, error) {
		if _, err := workflow.ExecuteActivity(ctx, declined, n).Get(ctx); err == nil {
			return 0, nil
		}
		// Handled: tell the customer, then give up.
		if _, err := workflow.ExecuteActivity(ctx, notify, n).Get(ctx); err != nil {
			return 0, err
		}
		return 0, errors.New("order abandoned")
	}
	require.NoError(t, engine.RegisterActivity(e, declined, activity.Options{Name: "Declined"}))
	require.NoError(t, engine.RegisterActivity(e, notify, activity.Options{Name: "Notify"}))
	require.NoError(t, engine.RegisterWorkflow(e, wf, engine.WorkflowOptions{Name: "Abandons"}))
	run(t, e)
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, wf, 1, engine.StartOptions{ID: "abandons"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.Error(t, err)
	d := waitDeadLetter(t, e, engine.DeadWorkflow)

	res, err := e.Redrive(ctx, d.ID)
	require.NoError(t, err)
	again, err := engine.GetRun[int](ctx, e, "abandons")
	require.NoError(t, err)
	require.Equal(t, res.RunID, again.RunID)
	_, err = again.Result(ctx)
	require.ErrorContains(t, err, "order abandoned", "the redriven run replays to the same decision")
	require.Equal(t, int32(1), notified.Load(), "the activity after the handled failure did not run again")
}
