package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/internal/backlog"
	"github.com/durable-go/durable/internal/dbclock"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/osclock"
	"github.com/durable-go/durable/internal/runcache"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/codecstore"
)

// Options configure an Engine. The zero value works: one queue named
// "default", the defaults listed with each field.
type Options struct {
	// Queues lists the queues this engine's workers poll, with their
	// concurrency. Default (nil or empty): "default", and every queue a
	// registration names (WorkflowOptions.Queue, activity.Options.Queue),
	// each with the default QueueOptions, as a Temporal worker serves what
	// is registered on it. A list given here is polled as is, as River's
	// Config.Queues is: Run logs a Warn for each registration on a queue
	// not in it (its tasks wait for another worker that polls that queue).
	// Registration while Run runs, on a queue it does not poll, is refused
	// without Options.Queues (register before Run), and warned of with it.
	// An engine that only starts workflows runs no workers until Run is
	// called.
	Queues map[string]QueueOptions
	// Logger receives the engine's logs. Default slog.Default().
	Logger *slog.Logger
	// NowFunc is the time-skipping test hook (package durabletest sets it to
	// its fake clock): when set, every time the engine writes or compares
	// comes from it as is. Do not set it in production: the database's clock
	// decides. Default: the database's clock (read in New and every ten seconds
	// after, and carried forward by the process's monotonic clock), so that
	// a worker whose own clock is wrong neither fires a timer early nor takes
	// a live claim (see docs/reliability.md).
	NowFunc func() time.Time
	// WorkerID names this engine's claims. Default host:pid:random.
	WorkerID string
	// CacheSize is how many runs in progress this engine keeps in memory.
	// A step of a cached run costs its new events; a step of one that is
	// not cached replays the run's history first (durable_run_cache_total
	// counts hits and misses, durable_replay_seconds the replays). Raise
	// it when more runs than this are active at once on the engine, sleeps
	// under 30 seconds included; lower it to bound memory. Runs that sleep
	// longer are not kept. Default 10,000.
	CacheSize int
	// WorkflowTaskLease is how long a workflow task claim holds before
	// another worker may take the task. Default 30s.
	WorkflowTaskLease time.Duration
	// PollInterval is the backstop poll, for when a notification is missed:
	// work is normally picked up, and Result learns of a close, through
	// LISTEN/NOTIFY. It bounds how late a lost notification makes either.
	// A shorter one costs more queries while idle. Default 5s.
	PollInterval time.Duration
	// ShutdownTimeout bounds how long Run waits, after its context is done,
	// for running activities to finish before cancelling them. Default 30s.
	ShutdownTimeout time.Duration
	// WorkflowDeadlockTimeout is how long workflow code may run without
	// yielding (returning, or a blocking workflow call such as a Future's
	// Get or workflow.Sleep) before its workflow task fails with a
	// *workflow.DeadlockError naming the run and where the code was: a
	// loop that makes no such call would otherwise hold a workflow slot,
	// and an eager Start, for ever. The task is retried like a panicked
	// one; Go cannot stop the goroutine, which runs on, detached, until it
	// yields (see workflow.DeadlockError). A Start whose context ends
	// sooner does not run the first task itself; Run, stopping, waits no
	// longer than this for such a task. Negative turns the bound off (for
	// stepping through workflow code in a debugger). Default 1s.
	WorkflowDeadlockTimeout time.Duration
	// MaxPayloadBytes is the largest input or result accepted, encoded.
	// Default 2 MiB.
	MaxPayloadBytes int
	// CommitGroupSize is the most workflow steps, activity results and
	// starts this engine commits in one transaction. Only writes that
	// arrive while others are committing wait and go together, so an idle
	// engine commits each at once (grouping adds no latency) and a busy one
	// commits many per transaction, which is most of its throughput under
	// load. Starts and the reads behind Result share transactions the same
	// way in a process that never calls Run, such as an API server. 1 turns
	// grouping off, every write its own transaction; there is seldom a
	// reason to change it. Default 64.
	CommitGroupSize int
	// ActivityRunAhead lets an activity start before the workflow step
	// that scheduled it is recorded, and is how long that step waits for
	// it: a result that comes within it is recorded together with the
	// step, in one transaction instead of two. This saves a commit when a
	// step that a worker picked up from the queue (the first step of a run
	// started in another process, a step after a signal) schedules one
	// quick activity. What it changes for you: if the step is then not
	// recorded (the worker died or lost its claim), the activity runs
	// again, as attempt 1 again, with the same idempotency key; activities
	// run at least once in any case, and workflow code never sees a result
	// that was not recorded. Negative turns it off: activities start only
	// once their schedule is recorded. It must be under half of
	// WorkflowTaskLease. Default 2ms.
	ActivityRunAhead time.Duration
	// HistoryWarnEvents is the history length past which a run is warned
	// about (a log line and durable_large_histories_total): a history that
	// long makes replays slow; the workflow should continue as new.
	// Default 10,000.
	HistoryWarnEvents int
	// RandFunc returns numbers in [0, 1) for the retry delays' jitter.
	// Default math/rand/v2.Float64. Tests pass a fixed source.
	RandFunc func() float64
	// Registerer receives the engine's Prometheus metrics. Default: none
	// (importing the library registers nothing globally).
	Registerer prometheus.Registerer
	// MetricsInterval is how often the gauges that need a query (queue
	// depth and oldest-ready age, dead letters) are refreshed while Run
	// runs: one query for the queues and one for the dead letters. Default 15s.
	MetricsInterval time.Duration
	// TracerProvider makes the engine's OpenTelemetry spans. Default: none.
	TracerProvider trace.TracerProvider
	// SkipMigrate leaves the schema alone in New: for people who apply
	// migrations with their own tools (`durable migrate print`).
	SkipMigrate bool
	// Codec encodes every payload (inputs, results, signals, side-effect
	// values, heartbeat details) before it is stored and decodes it after it
	// is read, for example codec.AESGCM to encrypt payloads at rest. Every
	// engine on the database needs a codec that decodes what the others
	// wrote. Payloads stored before the codec was set are still read.
	// Default: none; payloads are stored as plain JSON, and a payload that a
	// codec encoded is an error naming the run and the payload.
	Codec codec.PayloadCodec

	// queuesFromRegistrations is set by withDefaults when Queues was not
	// given: Run then polls every queue a registration names too.
	queuesFromRegistrations bool
	// osNowFunc is the process's own clock. Default time.Now. Tests set it
	// to a clock that is wrong (skewed) to show that it decides nothing.
	osNowFunc func() time.Time
}

// QueueOptions configure the workers of one queue.
type QueueOptions struct {
	// WorkflowConcurrency is how many workflow tasks of the queue this
	// engine runs at once. Workflow tasks are short (CPU and a commit);
	// raise it if durable_queue_oldest_ready_age_seconds{kind="workflow"}
	// grows while the engine's CPU is not busy. A step that follows an
	// activity's result on the engine that has the run in memory, and the
	// wake of such a run whose short timer fired, do not count against it.
	// Default 32.
	WorkflowConcurrency int
	// ActivityConcurrency is how many activities of the queue this engine
	// runs at once. Size it for what the activities wait on (an API's rate
	// limit, your database), not for the CPU: activities that mostly wait
	// can take many more, and quick ones gain from more too, since the
	// engine then commits their steps in larger groups. Recording an
	// activity's result and running the workflow's next step usually do not
	// hold its slot, so the slot takes the next activity at once. The engine
	// may hold up to about twice this many activities claimed; one that
	// waits for a slot longer than a second (a tenth of its lease, if
	// shorter) goes back to the queue without spending an attempt.
	// Default 32.
	ActivityConcurrency int
}

func (q QueueOptions) withDefaults() QueueOptions {
	if q.WorkflowConcurrency == 0 {
		q.WorkflowConcurrency = 32
	}
	if q.ActivityConcurrency == 0 {
		q.ActivityConcurrency = 32
	}
	return q
}

const (
	defaultWorkflowTaskLease = 30 * time.Second
	defaultActivityRunAhead  = 2 * time.Millisecond
)

const (
	// DefaultQueue is the queue used when none is named.
	DefaultQueue = "default"
	maxIDLen     = 1000
)

func (o Options) withDefaults() Options {
	if len(o.Queues) == 0 {
		o.Queues = map[string]QueueOptions{DefaultQueue: {}}
		o.queuesFromRegistrations = true
	}
	qs := make(map[string]QueueOptions, len(o.Queues))
	for name, q := range o.Queues {
		qs[name] = q.withDefaults()
	}
	o.Queues = qs
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.osNowFunc == nil {
		o.osNowFunc = osclock.Now
	}
	if o.WorkerID == "" {
		host, _ := os.Hostname()
		o.WorkerID = fmt.Sprintf("%s:%d:%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if o.CacheSize == 0 {
		o.CacheSize = 10_000
	}
	if o.WorkflowTaskLease == 0 {
		o.WorkflowTaskLease = defaultWorkflowTaskLease
	}
	if o.PollInterval == 0 {
		o.PollInterval = 5 * time.Second
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.WorkflowDeadlockTimeout == 0 {
		o.WorkflowDeadlockTimeout = time.Second
	}
	if o.MaxPayloadBytes == 0 {
		o.MaxPayloadBytes = 2 << 20
	}
	if o.HistoryWarnEvents == 0 {
		o.HistoryWarnEvents = 10_000
	}
	if o.MetricsInterval == 0 {
		o.MetricsInterval = 15 * time.Second
	}
	if o.CommitGroupSize == 0 {
		o.CommitGroupSize = 64
	}
	if o.ActivityRunAhead == 0 {
		o.ActivityRunAhead = defaultActivityRunAhead
	}
	return o
}

func (o Options) validate() error {
	for name, q := range o.Queues {
		if name == "" {
			return errors.New("engine options: empty queue name")
		}
		if err := checkName("engine options: queue name", name, 200); err != nil {
			return err
		}
		if q.WorkflowConcurrency < 0 || q.ActivityConcurrency < 0 {
			return fmt.Errorf("engine options: queue %q: concurrency must not be negative", name)
		}
	}
	switch {
	case o.CacheSize < 0:
		return errors.New("engine options: CacheSize must not be negative")
	case o.WorkflowTaskLease < 0, o.PollInterval < 0, o.ShutdownTimeout < 0:
		return errors.New("engine options: durations must not be negative")
	case o.CommitGroupSize < 0:
		return errors.New("engine options: CommitGroupSize must not be negative")
	case o.MaxPayloadBytes < 0:
		return errors.New("engine options: MaxPayloadBytes must not be negative")
	}
	if ahead, lease := cmp.Or(o.ActivityRunAhead, defaultActivityRunAhead), cmp.Or(o.WorkflowTaskLease, defaultWorkflowTaskLease); ahead >= lease/2 {
		return fmt.Errorf("engine options: ActivityRunAhead (%s) must be under half of WorkflowTaskLease (%s): a task holds its claim while it waits", ahead, lease)
	}
	return nil
}

// Engine runs workflows and activities on PostgreSQL. It is both the client
// (Start, Signal, Result) and, once Run is called, the worker. Every method is
// safe for concurrent use.
type Engine struct {
	store store.Store    // the payload codec over the database's store
	pg    *pgBackend     // the Postgres store, if it is one (postgres.go)
	sq    *sqliteBackend // the SQLite store, if it is one (sqlite.go)
	close func() error   // closes what Open opened (open.go), or nil
	wrap  func(store.Store) store.Store
	opts  Options
	log   *slog.Logger

	mu         sync.RWMutex
	workflows  map[string]*workflowDef
	activities map[string]*activityDef
	names      map[uintptr]string // function pointer to registered name
	// workflowTypes and activityTypes list the registered names, for claims.
	workflowTypes, activityTypes []string
	// served is the queues Run polls, while it runs (see serve).
	served map[string]QueueOptions

	cache   *runcache.Cache
	backlog *backlog.Backlog // activities this engine could not hand off
	wakes   wakeups          // soon-due timers of cached runs (timerfire.go)
	hub     *notify.Hub
	nowFunc func() time.Time // the engine's clock: Options.NowFunc, or the database's
	dueFunc func() time.Time // nowFunc at its earliest (see dbclock.Clock.Due)
	running atomic.Bool
	pools   atomic.Pointer[pools] // set while Run runs
	// handoffMu orders Start's hand-offs before Run drops its pools.
	handoffMu sync.RWMutex
	metrics   *metrics
	tracer    trace.Tracer
}

// newEngine returns an engine on st and brings the database schema up to
// date (unless Options.SkipMigrate). pg is set when st is the Postgres
// store, for the calls that run in a caller's transaction. wrap, if set,
// stands between the engine and every store it uses (the tests' fault
// injector); the payload codec stands above it.
func newEngine(st store.Store, pg *pgBackend, opts Options, wrap func(store.Store) store.Store) (*Engine, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	e := newRegistry(opts, opts.CacheSize)
	e.pg, e.wrap = pg, wrap
	e.backlog = backlog.New(
		func(queue string) { e.hub.Publish(notify.ActivityTasks(queue)) },
		func(queue string) { e.hub.WakeLocal(notify.ActivityTasks(queue)) })
	e.store = e.layered(st)
	e.hub = notify.NewHub(e.store, e.log)
	e.hub.Backstop = func(ctx context.Context, runIDs []string) ([]string, error) {
		return e.store.NotRunning(ctx, runIDs)
	}
	e.hub.BackstopEvery = opts.PollInterval
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.prepareSchema(ctx); err != nil { // schema.go
		return nil, fmt.Errorf("engine: %w", err)
	}
	e.nowFunc = opts.NowFunc
	if e.nowFunc == nil {
		c, err := dbclock.New(ctx, e.store.Now, opts.osNowFunc, e.log)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.nowFunc, e.dueFunc = c.Now, c.Due
	}
	// Metrics last: a New that failed above (the database down, say) leaves
	// the registry as it was, so it can simply be called again.
	if err := e.registerMetrics(); err != nil {
		return nil, err
	}
	return e, nil
}

// newRegistry returns an engine with opts (defaults applied) and what
// registration and replay need, and no store: newEngine adds the store,
// NewReplayer uses it as it is.
func newRegistry(opts Options, cacheSize int) *Engine {
	return &Engine{
		opts: opts, log: opts.Logger,
		workflows: map[string]*workflowDef{}, activities: map[string]*activityDef{}, names: map[uintptr]string{},
		cache: runcache.New(cacheSize), metrics: newMetrics(), tracer: newTracer(opts.TracerProvider),
	}
}

// layered returns st as the engine uses it: below the payload codec, and
// above wrap if it is set.
func (e *Engine) layered(st store.Store) store.Store {
	if e.wrap != nil {
		st = e.wrap(st)
	}
	return codecstore.New(st, e.opts.Codec, e.log)
}

// registerMetrics registers the engine's metrics on Options.Registerer, all
// or none.
func (e *Engine) registerMetrics() error {
	r := e.opts.Registerer
	if r == nil {
		return nil
	}
	cs := e.metrics.collectors()
	for i, c := range cs {
		if err := r.Register(c); err != nil {
			for _, done := range cs[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	return nil
}

// checkName validates an identifier that reaches the database: a workflow
// ID, signal name, queue, job key. PostgreSQL text holds valid UTF-8 without
// NUL bytes.
func checkName(what, s string, limit int) error {
	switch {
	case len(s) > limit:
		return fmt.Errorf("%s is %d bytes, the limit is %d", what, len(s), limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %.40q is not valid UTF-8", what, s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s %.40q contains a NUL byte, which PostgreSQL text cannot hold", what, s)
	}
	return nil
}

// now is the engine's clock at the database's precision (microseconds). An
// event's time is what workflow.Now returns while the event is applied: a
// run that applies an event it wrote (a hand-off, a fused step) must see
// the time a replay will read back.
func (e *Engine) now() time.Time { return e.nowFunc().Truncate(time.Microsecond) }

// dueNow is the clock that decides whether a timer is due or a claim has
// lapsed: the database's at its earliest, or Options.NowFunc.
func (e *Engine) dueNow() time.Time {
	if e.dueFunc == nil {
		return e.now()
	}
	return e.dueFunc().Truncate(time.Microsecond)
}

// ErrCodecMismatch is returned by Signal, SignalTx and SignalWithStart, and
// nothing is written, when this engine's codec cannot decode what the run
// it would write to already holds: the engines that run it could not have
// decoded what it would write either (a wrong key, or a key the others do
// not have yet).
var ErrCodecMismatch = errors.New("this engine's codec cannot decode the run it would write to")

// codecMismatch is the codec wrapper's refusal err as ErrCodecMismatch, its
// message unchanged.
type codecMismatch struct{ err error }

func (e codecMismatch) Error() string   { return e.err.Error() }
func (e codecMismatch) Unwrap() []error { return []error{ErrCodecMismatch, e.err} }
