package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

func SleepWeek(ctx workflow.Context, _ int) (int, error) {
	return 0, workflow.Sleep(ctx, 7*24*time.Hour)
}

// measure returns the goroutine count and live heap after a full GC.
func measure() (goroutines int, heap uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}

// startSleepers starts n runs of SleepWeek from 16 starters and waits until
// all runs sleep: total timer rows and no task left.
func startSleepers(tb testing.TB, ctx context.Context, e *engine.Engine, pool *pgxpool.Pool, n, total int) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := engine.Start(ctx, e, SleepWeek, i, engine.StartOptions{}); err != nil {
					tb.Error(err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	require.Eventually(tb, func() bool {
		var timers, tasks int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_timers), (SELECT count(*) FROM durable_workflow_tasks)`).Scan(&timers, &tasks)
		return err == nil && timers == total && tasks == 0
	}, 5*time.Minute, 10*time.Millisecond, "every run is asleep")
}

// TestSleepingRunsHoldNothing checks that runs waiting on a timer hold no
// goroutine and (almost) no memory in the worker. It is not parallel: it
// counts the process's goroutines.
func TestSleepingRunsHoldNothing(t *testing.T) { //nolint:paralleltest // counts goroutines
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, SleepWeek, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)
	// Warm up connections and code paths, then take the baseline.
	startSleepers(t, ctx, e, pool, 50, 50)
	g0, h0 := measure()
	const n = 1000
	startSleepers(t, ctx, e, pool, n, n+50)
	g1, h1 := measure()
	t.Logf("%d sleeping runs: goroutines %d -> %d, live heap %d KB -> %d KB", n, g0, g1, h0/1024, h1/1024)
	require.LessOrEqual(t, g1, g0+2, "a sleeping run holds no goroutine")
	require.Less(t, int64(h1)-int64(h0), int64(2<<20), "a sleeping run holds no memory to speak of")
}

// BenchmarkSleepingRuns starts 10,000 runs that sleep for a week and reports
// the worker's goroutines and live heap per sleeping run, and the database
// size per run. Run with -benchtime=1x.
func BenchmarkSleepingRuns(b *testing.B) {
	for _, n := range []int{10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pool := pgtest.Pool(b)
			e, err := engine.New(pool, engine.Options{Logger: quietLogger()})
			require.NoError(b, err)
			require.NoError(b, engine.RegisterWorkflow(e, SleepWeek, engine.WorkflowOptions{}))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			startSleepers(b, ctx, e, pool, 50, 50)
			var db0 int64
			require.NoError(b, pool.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&db0))
			g0, h0 := measure()
			b.ResetTimer()
			t0 := time.Now()
			startSleepers(b, ctx, e, pool, n, n+50)
			elapsed := time.Since(t0)
			b.StopTimer()
			g1, h1 := measure()
			var db1 int64
			require.NoError(b, pool.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&db1))
			b.ReportMetric(float64(g1-g0), "goroutines-added")
			b.ReportMetric(float64(int64(h1)-int64(h0))/float64(n), "heap-B/run")
			b.ReportMetric(float64(db1-db0)/float64(n), "db-B/run")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "started-runs/s")
		})
	}
}

func SleepTwoSeconds(ctx workflow.Context, _ int) (int, error) {
	return 0, workflow.Sleep(ctx, 2*time.Second)
}

// BenchmarkTimerLag starts n runs that sleep 2s (their timers come due
// within about the same second) and reports p50/p99 of how late each timer
// fired (TimerFired recorded minus due time) and of how late each result was
// seen (result minus start call minus 2s). Run with -benchtime=1x.
func BenchmarkTimerLag(b *testing.B) {
	for _, n := range []int{1000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pool := pgtest.Pool(b)
			e, err := engine.New(pool, engine.Options{Logger: quietLogger()})
			require.NoError(b, err)
			require.NoError(b, engine.RegisterWorkflow(e, SleepTwoSeconds, engine.WorkflowOptions{}))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() { cancel(); <-done }()

			var mu sync.Mutex
			var late []time.Duration
			var wg sync.WaitGroup
			next := make(chan int)
			b.ResetTimer()
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						t0 := time.Now()
						r, err := engine.Start(ctx, e, SleepTwoSeconds, i, engine.StartOptions{})
						if err != nil {
							b.Error(err)
							continue
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							if _, err := r.Result(ctx); err != nil {
								b.Error(err)
								return
							}
							d := time.Since(t0) - 2*time.Second
							mu.Lock()
							late = append(late, d)
							mu.Unlock()
						}()
					}
				}()
			}
			for i := range n {
				next <- i
			}
			close(next)
			wg.Wait()
			b.StopTimer()
			var lags []float64
			rows, err := pool.Query(ctx, `
				SELECT extract(epoch FROM f.created_at - (s.attributes->>'fire_at')::timestamptz) * 1000
				FROM durable_events f JOIN durable_events s
				  ON s.run_id = f.run_id AND s.type = 'timer_started' AND (s.attributes->>'seq') = (f.attributes->>'seq')
				WHERE f.type = 'timer_fired'`)
			require.NoError(b, err)
			for rows.Next() {
				var ms float64
				require.NoError(b, rows.Scan(&ms))
				lags = append(lags, ms)
			}
			require.NoError(b, rows.Err())
			require.Len(b, lags, n)
			slices.Sort(lags)
			slices.Sort(late)
			b.ReportMetric(lags[len(lags)/2], "fire-lag-p50-ms")
			b.ReportMetric(lags[len(lags)*99/100], "fire-lag-p99-ms")
			b.ReportMetric(float64(late[len(late)/2].Microseconds())/1000, "result-late-p50-ms")
			b.ReportMetric(float64(late[len(late)*99/100].Microseconds())/1000, "result-late-p99-ms")
		})
	}
}

func Nap(ctx workflow.Context, n int) (int, error) {
	if err := workflow.Sleep(ctx, 20*time.Millisecond); err != nil {
		return 0, err
	}
	return n, workflow.Sleep(ctx, 7*24*time.Hour)
}

// A run that sleeps briefly stays in the cache and wakes without a replay;
// one that sleeps for a week leaves it.
func TestShortSleepsStayCached(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{Registerer: reg})
	require.NoError(t, engine.RegisterWorkflow(e, Nap, engine.WorkflowOptions{}))
	run(t, e)
	ctx := resultCtx(t)
	_, err := engine.Start(ctx, e, Nap, 1, engine.StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM durable_timers WHERE fire_at > now() + interval '1 day'`).Scan(&n) == nil && n == 1
	}, 10*time.Second, 5*time.Millisecond, "the run reached its week-long sleep")
	cache := func(result string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "durable_run_cache_total" && m.GetLabel()[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	require.Equal(t, 1.0, cache("hit"), "the task after the short sleep found the run in memory")
	require.Equal(t, 1.0, cache("miss"), "only the first task built it")
}
