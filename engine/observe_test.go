package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

func NapThenAdd(ctx workflow.Context, n int) (int, error) {
	if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity(ctx, Add, n).Get(ctx)
}

func TestMetricsMatchTheWorkload(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	reg := prometheus.NewRegistry()
	e := newEngine(t, pool, engine.Options{Registerer: reg, MetricsInterval: 20 * time.Millisecond})
	registerPipeline(t, e)
	require.NoError(t, engine.RegisterWorkflow(e, NapThenAdd, engine.WorkflowOptions{}))
	var flakyCalls atomic.Int32
	flaky := func(context.Context, int) (int, error) {
		if flakyCalls.Add(1) <= 2 {
			return 0, errors.New("try again")
		}
		return 1, nil
	}
	broken := func(context.Context, int) (int, error) { return 0, activity.Permanent(errors.New("bad input")) }
	require.NoError(t, engine.RegisterActivity(e, flaky, activity.Options{Name: "Flaky", Retry: fastRetry(5)}))
	require.NoError(t, engine.RegisterActivity(e, broken, activity.Options{Name: "Broken"}))
	run(t, e)
	ctx := resultCtx(t)

	// The workload: two three-activity workflows, one that sleeps, a job
	// that fails twice and then succeeds, a job that fails for good.
	for i := range 2 {
		r, err := engine.Start(ctx, e, Pipeline, i, engine.StartOptions{})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.NoError(t, err)
	}
	nap, err := engine.Start(ctx, e, NapThenAdd, 1, engine.StartOptions{})
	require.NoError(t, err)
	_, err = nap.Result(ctx)
	require.NoError(t, err)
	_, err = engine.Enqueue(ctx, e, flaky, 0, engine.JobOptions{})
	require.NoError(t, err)
	_, err = engine.Enqueue(ctx, e, broken, 0, engine.JobOptions{})
	require.NoError(t, err)
	waitDeadLetter(t, e, engine.DeadJob)
	require.Eventually(t, func() bool {
		return value(reg, "durable_outcomes_total", "kind", "activity", "type", "Flaky", "outcome", "completed") == 1
	}, 20*time.Second, 5*time.Millisecond)

	out := func(kind, typ, outcome string) float64 {
		return value(reg, "durable_outcomes_total", "kind", kind, "type", typ, "outcome", outcome)
	}
	require.Equal(t, 2.0, out("workflow", "Pipeline", "completed"))
	require.Equal(t, 1.0, out("workflow", "NapThenAdd", "completed"))
	require.Equal(t, 3.0, out("activity", "Add", "completed"), "two pipelines and the nap")
	require.Equal(t, 2.0, out("activity", "Double", "completed"))
	require.Equal(t, 2.0, out("activity", "Flaky", "failed_retrying"))
	require.Equal(t, 1.0, out("activity", "Flaky", "completed"))
	require.Equal(t, 1.0, out("activity", "Broken", "failed_final"))
	require.Equal(t, 1.0, out("activity", "Broken", "dead_lettered"))
	require.Equal(t, 0.0, out("activity", "Broken", "failed_retrying"), "a permanent error is not retried")

	families, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				counts[f.GetName()] += h.GetSampleCount()
			}
		}
	}
	require.Equal(t, uint64(1), counts["durable_timer_lag_seconds"], "one timer fired")
	require.Equal(t, uint64(3+7+3+1), counts["durable_duration_seconds"], "3 workflows, 7 workflow activities, the jobs' 3 + 1 attempts")
	require.Positive(t, counts["durable_workflow_task_seconds"])
	require.Eventually(t, func() bool {
		return value(reg, "durable_dead_letters", "kind", "job") == 1
	}, 20*time.Second, 5*time.Millisecond, "the periodic query reports the dead letter")
	require.Equal(t, 0.0, value(reg, "durable_dead_letters", "kind", "workflow"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "durable_nondeterminism_errors_total"), "registered, at zero")
}

// value returns the value of the counter or gauge series name{labels}, or 0
// if it has not been written. labels are name, value pairs.
func value(reg *prometheus.Registry, name string, labels ...string) float64 {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

func SleepWeekBetween(ctx workflow.Context, n int) (int, error) {
	a, err := workflow.ExecuteActivity(ctx, Add, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	workflow.Logger(ctx).Info("sleeping a week")
	if err := workflow.Sleep(ctx, 7*24*time.Hour); err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity(ctx, Double, a).Get(ctx)
}

func TestOneTraceAcrossAWeekOfSleep(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	env := durabletest.New(t, durabletest.Options{Engine: engine.Options{TracerProvider: tp}})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepWeekBetween, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Add, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Double, activity.Options{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, SleepWeekBetween, 1, engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, got)

	// Spans: the start, 2 activities, 1 timer fire, and 4 workflow tasks
	// (at the start, after each activity, after the timer), one fewer if
	// the task after the timer ran Double ahead of its schedule and
	// committed its outcome with it (an attribute of that task's span).
	var spans tracetest.SpanStubs
	ranAhead := func(s tracetest.SpanStub) bool {
		for _, kv := range s.Attributes {
			if kv.Key == "durable.run_ahead.seq" {
				return true
			}
		}
		return false
	}
	var merged int
	require.Eventually(t, func() bool {
		spans = exp.GetSpans()
		tasks := 0
		merged = 0
		for _, s := range spans {
			if s.Name == "durable.workflow_task" {
				tasks++
				if ranAhead(s) {
					merged++
				}
			}
		}
		return tasks+merged >= 4 && len(spans) >= 4+tasks
	}, 10*time.Second, 5*time.Millisecond)
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	require.Len(t, byName["durable.start"], 1)
	start := byName["durable.start"][0]
	require.Len(t, byName["durable.workflow_task"], 4-merged, "at the start, after each activity, after the timer")
	require.Len(t, byName["durable.activity"], 2)
	require.Len(t, byName["durable.timer_fire"], 1)
	for _, s := range spans {
		require.Equal(t, start.SpanContext.TraceID(), s.SpanContext.TraceID(), "%s is in the run's trace", s.Name)
		if s.Name != "durable.start" {
			require.Equal(t, start.SpanContext.SpanID(), s.Parent.SpanID(), "%s is a child of the start span", s.Name)
		}
	}
	attrs := map[string]string{}
	for _, kv := range byName["durable.activity"][1].Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, "Double", attrs["durable.activity"], "the activity after the week")
	require.Equal(t, "1", attrs["durable.attempt"])
}

func TestReplayedWorkflowCodeLogsNothing(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	// The run leaves the cache while it sleeps, so the code after the week
	// runs on a replay that passes the log line again.
	env := durabletest.New(t, durabletest.Options{Engine: engine.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}})
	require.NoError(t, engine.RegisterWorkflow(env.Engine, SleepWeekBetween, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Add, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(env.Engine, Double, activity.Options{}))
	env.Run()
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, env.Engine, SleepWeekBetween, 1, engine.StartOptions{})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logs.String(), "sleeping a week"), "the line is logged once:\n%s", logs.String())
	require.Contains(t, logs.String(), "run_id="+r.RunID, "the workflow logger carries the run")
}

// A New that fails (here: the schema is not there and SkipMigrate is set)
// registers nothing, so the same registry takes the next New.
func TestFailedNewLeavesTheRegistryAlone(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	pool := newPool(t, pgtest.EmptyDatabase(t))
	_, err := engine.New(pool, engine.Options{Registerer: reg, SkipMigrate: true, Logger: quietLogger()})
	require.ErrorContains(t, err, "run `durable migrate`")
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Zero(t, n, "nothing registered")

	_, err = engine.New(pool, engine.Options{Registerer: reg, Logger: quietLogger()})
	require.NoError(t, err, "the retry registers")
	_, err = engine.New(pool, engine.Options{Registerer: reg, Logger: quietLogger()})
	require.ErrorContains(t, err, "register metrics", "a second engine on one registry is an error")
}

// A queue that drains reports no ready tasks and an oldest-ready age of 0,
// not the last values it had: an alert on the age (see
// docs/operations.md) would go on firing over an empty queue.
func TestQueueGaugesGoToZeroWhenTheQueueDrains(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	reg := prometheus.NewRegistry()
	watcher := newEngine(t, pool, engine.Options{Registerer: reg, MetricsInterval: 10 * time.Millisecond,
		Queues: map[string]engine.QueueOptions{engine.DefaultQueue: {}}})
	opts := activity.Options{Name: "Park", Queue: "parked"}
	require.NoError(t, engine.RegisterActivity(watcher, Add, opts))
	run(t, watcher) // it polls "default" only (Options.Queues): the job waits on "parked"
	ctx := resultCtx(t)
	_, err := engine.Enqueue(ctx, watcher, Add, 1, engine.JobOptions{})
	require.NoError(t, err)
	gauge := func(name string) float64 { return value(reg, name, "queue", "parked", "kind", "activity") }
	require.Eventually(t, func() bool {
		return gauge("durable_queue_ready_tasks") == 1 && gauge("durable_queue_oldest_ready_age_seconds") > 0
	}, 20*time.Second, 5*time.Millisecond, "the gauges show the parked job waiting")

	// The queue drains between two refreshes (the job was claimed and
	// done, or cancelled): the next refresh finds no task on it at all.
	tag, err := pool.Exec(ctx, `DELETE FROM durable_activity_tasks WHERE queue = 'parked'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.Eventually(t, func() bool {
		return gauge("durable_queue_ready_tasks") == 0 && gauge("durable_queue_oldest_ready_age_seconds") == 0
	}, 5*time.Second, 5*time.Millisecond, "the drained queue reads 0, not its last values")
}
