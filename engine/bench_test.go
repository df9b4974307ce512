package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

func Noop(_ context.Context, n int) (int, error) { return n + 1, nil }

func ThreeNoops(ctx workflow.Context, n int) (int, error) {
	for range 3 {
		var err error
		if n, err = workflow.ExecuteActivity(ctx, Noop, n).Get(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func OneNoop(ctx workflow.Context, n int) (int, error) {
	return workflow.ExecuteActivity(ctx, Noop, n).Get(ctx)
}

func benchEngine(b *testing.B) (*engine.Engine, context.Context) {
	pool := pgtest.Pool(b)
	e, err := engine.New(pool, engine.Options{Logger: quietLogger()})
	require.NoError(b, err)
	require.NoError(b, engine.RegisterWorkflow(e, ThreeNoops, engine.WorkflowOptions{}))
	require.NoError(b, engine.RegisterWorkflow(e, OneNoop, engine.WorkflowOptions{}))
	require.NoError(b, engine.RegisterActivity(e, Noop, activity.Options{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		require.NoError(b, <-done)
	})
	return e, context.Background()
}

// BenchmarkW1Throughput starts b.N workflows of three sequential no-op
// activities from 32 starters and reports completed workflows per second,
// from the first start to the last result. Run it with -benchtime=2000x.
func BenchmarkW1Throughput(b *testing.B) {
	e, ctx := benchEngine(b)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, b.N)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := engine.Start(ctx, e, ThreeNoops, i, engine.StartOptions{})
				if err != nil {
					errs <- err
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := r.Result(ctx); err != nil {
						errs <- err
					}
				}()
			}
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "workflows/s")
}

// BenchmarkW2Latency starts a one-activity workflow and waits for its
// result, b.N times in a row, from inside the worker process; it reports
// p50 and p99 latency. Run it with -benchtime=200x.
func BenchmarkW2Latency(b *testing.B) {
	e, ctx := benchEngine(b)
	// Warm up: the first run pays for connections and prepared statements.
	r, err := engine.Start(ctx, e, OneNoop, 0, engine.StartOptions{})
	require.NoError(b, err)
	_, err = r.Result(ctx)
	require.NoError(b, err)

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		r, err := engine.Start(ctx, e, OneNoop, i, engine.StartOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Result(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
