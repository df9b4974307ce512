package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// metrics are the engine's Prometheus metrics. They always exist; they are
// registered only on Options.Registerer.
type metrics struct {
	queueReady     *prometheus.GaugeVec
	queueAge       *prometheus.GaugeVec
	outcomes       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	timerLag       prometheus.Histogram
	taskLatency    prometheus.Histogram
	replayTime     prometheus.Histogram
	cache          *prometheus.CounterVec
	deadLetters    *prometheus.GaugeVec
	deadLetterAge  *prometheus.GaugeVec
	nondeterminism prometheus.Counter
	taskFailures   *prometheus.CounterVec
	largeHistories *prometheus.CounterVec
	staleWrites    *prometheus.CounterVec
	runAhead       *prometheus.CounterVec

	// queues are those the last refresh of the queue gauges saw tasks or
	// timers on. Only the gauges' refresh, one at a time, uses it.
	queues map[string]bool
}

// Result label values of durable_activity_run_ahead_total.
const (
	runAheadMerged   = "merged"
	runAheadRecorded = "recorded"
	runAheadDropped  = "dropped"
)

// Outcome label values of durable_outcomes_total.
const (
	outcomeCompleted      = "completed"
	outcomeFailedRetrying = "failed_retrying"
	outcomeFailedFinal    = "failed_final"
	outcomeDeadLettered   = "dead_lettered"
)

func newMetrics() *metrics {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	return &metrics{
		queueReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "durable_queue_ready_tasks", Help: "Tasks ready to be claimed, per queue and kind (workflow, activity).",
		}, []string{"queue", "kind"}),
		queueAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "durable_queue_oldest_ready_age_seconds", Help: "How long the oldest ready task has waited, per queue and kind; 0 when none is ready. Alert on this, not on depth alone.",
		}, []string{"queue", "kind"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "durable_outcomes_total", Help: "Outcomes of activity attempts and workflow runs, per kind and type: completed, failed_retrying, failed_final, dead_lettered.",
		}, []string{"kind", "type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "durable_duration_seconds", Help: "Duration of activity attempts and of workflow runs (start to close), per kind and type.", Buckets: buckets,
		}, []string{"kind", "type"}),
		timerLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "durable_timer_lag_seconds", Help: "How late timers fired: fire time minus due time.", Buckets: buckets,
		}),
		taskLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "durable_workflow_task_seconds", Help: "Time to process one workflow task, from claim to commit.", Buckets: buckets,
		}),
		replayTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "durable_replay_seconds", Help: "Time to rebuild a run by replaying its history, on a cache miss.", Buckets: buckets,
		}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "durable_run_cache_total", Help: "Run cache lookups by workflow tasks, by result: hit or miss.",
		}, []string{"result"}),
		deadLetters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "durable_dead_letters", Help: "Dead letters not redriven yet, per kind (job, workflow).",
		}, []string{"kind"}),
		deadLetterAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "durable_dead_letter_oldest_age_seconds", Help: "Age of the oldest dead letter not redriven, per kind; 0 when none.",
		}, []string{"kind"}),
		nondeterminism: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "durable_nondeterminism_errors_total", Help: "Workflow tasks that failed because code no longer matches history.",
		}),
		largeHistories: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "durable_large_histories_total", Help: "Runs whose history passed Options.HistoryWarnEvents, per workflow type.",
		}, []string{"workflow"}),
		staleWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "durable_stale_writes_rejected_total", Help: "Writes refused because the claim they held was superseded (expired lease, newer attempt), per write: workflow_commit, workflow_fail, activity_outcome, heartbeat; workflow_decision: a workflow task's commit refused because events reached the run while it ran (the task runs again with them).",
		}, []string{"write"}),
		runAhead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "durable_activity_run_ahead_total", Help: "Activities started before the workflow task that scheduled them committed (Options.ActivityRunAhead), per result: merged (the outcome committed with the schedule), recorded (the schedule committed first, the outcome after), dropped (the schedule did not commit; the activity runs again).",
		}, []string{"result"}),
		taskFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "durable_workflow_task_failures_total", Help: "Failed workflow tasks, per reason: panic, nondeterminism, deadlock, unregistered, other.",
		}, []string{"reason"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.queueReady, m.queueAge, m.outcomes, m.duration, m.timerLag, m.taskLatency,
		m.replayTime, m.cache, m.deadLetters, m.deadLetterAge, m.nondeterminism, m.taskFailures, m.largeHistories, m.staleWrites, m.runAhead}
}

// pollGauges refreshes the gauges that need a query, every interval, with
// one cheap query for the queues and one for the dead letters.
func (e *Engine) pollGauges(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		e.refreshGauges(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Engine) refreshGauges(ctx context.Context) {
	now := e.now()
	qs, err := e.store.QueueStats(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "refresh queue gauges", slog.String("error", err.Error()))
		}
		return
	}
	age := func(t *time.Time) float64 {
		if t == nil {
			return 0
		}
		return max(now.Sub(*t).Seconds(), 0)
	}
	seen := make(map[string]bool, len(qs))
	for _, q := range qs {
		e.metrics.queueReady.WithLabelValues(q.Queue, "workflow").Set(float64(q.WorkflowTasks.Ready))
		e.metrics.queueReady.WithLabelValues(q.Queue, "activity").Set(float64(q.ActivityTasks.Ready))
		e.metrics.queueAge.WithLabelValues(q.Queue, "workflow").Set(age(q.WorkflowTasks.OldestReady))
		e.metrics.queueAge.WithLabelValues(q.Queue, "activity").Set(age(q.ActivityTasks.OldestReady))
		seen[q.Queue] = true
	}
	// A queue that drained since the last refresh has no row any more: it
	// reads 0, not the values it had, or an alert on the age would go on
	// firing over an empty queue.
	for q := range e.metrics.queues {
		if !seen[q] {
			for _, kind := range []string{"workflow", "activity"} {
				e.metrics.queueReady.WithLabelValues(q, kind).Set(0)
				e.metrics.queueAge.WithLabelValues(q, kind).Set(0)
			}
		}
	}
	e.metrics.queues = seen
	ds, err := e.store.DeadLetterStats(ctx)
	if err != nil {
		return
	}
	for _, d := range ds {
		e.metrics.deadLetters.WithLabelValues(d.Kind).Set(float64(d.Pending))
		e.metrics.deadLetterAge.WithLabelValues(d.Kind).Set(age(d.OldestPending))
	}
}

// The tracing side: spans for start, each workflow task, each activity
// attempt and each timer fire. The start span's context is stored with the
// run and is the parent of all later spans, so a run that sleeps for a week
// is still one trace.

var propagator = propagation.TraceContext{}

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer("github.com/durable-go/durable/engine")
}

// encodeTraceContext returns the W3C traceparent of ctx's span, or "".
func encodeTraceContext(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// runContext returns ctx with the run's stored span context as its remote
// parent.
func runContext(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// startSpan starts a span that is a child of the run's trace.
func (e *Engine) startSpan(ctx context.Context, traceparent, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return e.tracer.Start(runContext(ctx, traceparent), name, trace.WithAttributes(attrs...))
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
