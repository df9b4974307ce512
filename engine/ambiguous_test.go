package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/runcache"
	"github.com/durable-go/durable/workflow"
)

// ambWork is the workload of the ambiguous-commit tests: a workflow with a
// heartbeating activity, three parallel activities, a durable timer, a
// signal and an activity that fails its first attempt; an idle workflow
// that is terminated; and standalone jobs. Activities count their
// successful executions, per idempotency key, without deduplication.
type ambWork struct {
	mu        sync.Mutex
	successes map[string]int
	jobs      int
	jobsDone  chan struct{} // closed when every job key ran once
	jobKeys   int
}

func newAmbWork(jobs int) *ambWork {
	return &ambWork{successes: map[string]int{}, jobsDone: make(chan struct{}), jobKeys: jobs}
}

func (w *ambWork) succeeded(ctx context.Context) {
	key := activity.GetInfo(ctx).IdempotencyKey
	w.mu.Lock()
	defer w.mu.Unlock()
	w.successes[key]++
	if activity.GetInfo(ctx).RunID == "" && w.successes[key] == 1 {
		if w.jobs++; w.jobs == w.jobKeys {
			close(w.jobsDone)
		}
	}
}

// duplicates is how many successful executions repeated an earlier one.
func (w *ambWork) duplicates() (keys, dups int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.successes {
		dups += n - 1
	}
	return len(w.successes), dups
}

func (w *ambWork) Inc(ctx context.Context, n int) (int, error) {
	// A heartbeat that fails (an injected timeout) is not the attempt's
	// business: the outcome's own fence decides whether it counts.
	_ = activity.RecordHeartbeat(ctx, n)
	w.succeeded(ctx)
	return n + 1, nil
}

func (w *ambWork) Square(ctx context.Context, n int) (int, error) {
	w.succeeded(ctx)
	return n * n, nil
}

// Flaky fails the first attempt for a third of its inputs.
func (w *ambWork) Flaky(ctx context.Context, n int) (int, error) {
	if n%3 == 0 && activity.GetInfo(ctx).Attempt == 1 {
		return 0, errors.New("flaky: first attempt fails")
	}
	w.succeeded(ctx)
	return n + 7, nil
}

func (w *ambWork) Job(ctx context.Context, n int) (int, error) {
	w.succeeded(ctx)
	return n, nil
}

func (w *ambWork) Flow(ctx workflow.Context, n int) (int, error) {
	a, err := workflow.ExecuteActivity(ctx, w.Inc, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	var fs []workflow.Future[int]
	for i := range 3 {
		fs = append(fs, workflow.ExecuteActivity(ctx, w.Square, a+i))
	}
	sum := 0
	for _, f := range fs {
		sq, err := f.Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += sq
	}
	if err := workflow.Sleep(ctx, 50*time.Millisecond); err != nil {
		return 0, err
	}
	bonus, err := workflow.GetSignalChannel[int](ctx, "bonus").Receive(ctx)
	if err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity(ctx, w.Flaky, sum+bonus).Get(ctx)
}

// flowResult is what Flow(n) returns when signaled bonus(n).
func flowResult(n int) int {
	a := n + 1
	return a*a + (a+1)*(a+1) + (a+2)*(a+2) + bonus(n) + 7
}

func bonus(n int) int { return 10 * n }

// Idle waits for a signal that never comes; it is terminated.
func (w *ambWork) Idle(ctx workflow.Context, _ int) (int, error) {
	return workflow.GetSignalChannel[int](ctx, "never").Receive(ctx)
}

func (w *ambWork) register(t *testing.T, e *Engine) {
	t.Helper()
	ao := activity.Options{
		StartToCloseTimeout: 2 * time.Second,
		Retry:               activity.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaximumInterval: 200 * time.Millisecond},
	}
	named := func(name string) activity.Options { o := ao; o.Name = name; return o }
	require.NoError(t, RegisterWorkflow(e, w.Flow, WorkflowOptions{Name: "AmbFlow"}))
	require.NoError(t, RegisterWorkflow(e, w.Idle, WorkflowOptions{Name: "AmbIdle"}))
	require.NoError(t, RegisterActivity(e, w.Inc, named("AmbInc")))
	require.NoError(t, RegisterActivity(e, w.Square, named("AmbSquare")))
	require.NoError(t, RegisterActivity(e, w.Flaky, named("AmbFlaky")))
	require.NoError(t, RegisterActivity(e, w.Job, named("AmbJob")))
}

func ambLogger() *slog.Logger {
	if os.Getenv("DURABLE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// faultSeed is the injector's seed: DURABLE_FAULT_SEED, or a fixed one.
func faultSeed(t *testing.T) uint64 {
	seed := uint64(10)
	if s := os.Getenv("DURABLE_FAULT_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "DURABLE_FAULT_SEED")
	}
	t.Logf("fault seed %d (set DURABLE_FAULT_SEED to change it)", seed)
	return seed
}

// faultRate is the chance of each kind of fault per call:
// DURABLE_FAULT_RATE, or def.
func faultRate(t *testing.T, def float64) float64 {
	s := os.Getenv("DURABLE_FAULT_RATE")
	if s == "" {
		return def
	}
	r, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "DURABLE_FAULT_RATE")
	require.True(t, r >= 0 && r <= 0.5, "DURABLE_FAULT_RATE %v: want 0 to 0.5", r)
	return r
}

// faultyEngine returns an engine with inj in front of its store, changed
// by tweak, running until stop is called or the test ends.
func faultyEngine(t *testing.T, pool *pgxpool.Pool, id string, inj *faultInjector, w *ambWork, tweak ...func(*Engine)) (e *Engine, stop func()) {
	t.Helper()
	e, err := newOnPool(pool, Options{
		WorkerID: id, Logger: ambLogger(),
		PollInterval: 250 * time.Millisecond, WorkflowTaskLease: time.Second, ShutdownTimeout: 5 * time.Second,
		RandFunc: func() float64 { return 0.5 }}, inj.wrap)
	require.NoError(t, err)
	w.register(t, e)
	for _, f := range tweak {
		f(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return e, stop
}

// smallPool returns a pool on url of at most n connections, closed when the
// test ends.
func smallPool(t *testing.T, url string, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// retryInjected calls fn until it returns anything but an injected fault,
// and reports how many injected faults it saw.
func retryInjected[T any](ctx context.Context, fn func() (T, error)) (T, int, error) {
	for faults := 0; ; faults++ {
		v, err := fn()
		if err == nil || !isInjected(err) || ctx.Err() != nil {
			return v, faults, err
		}
	}
}

// TestAmbiguousCommitsLoseNothing runs a workload on two engines whose
// storage fails calls before they run and, for writes, after they ran
// (the caller sees a timeout for a write that committed), then checks on
// the database that nothing was appended twice or lost.
func TestAmbiguousCommitsLoseNothing(t *testing.T) {
	t.Parallel()
	const (
		flows = 300
		idles = 20
		jobs  = 40
	)
	rate := faultRate(t, 0.03) // of each kind of fault, per call
	began := time.Now()
	// Two engines, each on a pool of its own: ten connections each leave
	// room for the rest of the suite on a server with 100.
	url := pgtest.Database(t)
	pool, pool2 := smallPool(t, url, 10), smallPool(t, url, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	inj := newFaultInjector(faultSeed(t), rate)
	w := newAmbWork(jobs)
	e1, stop1 := faultyEngine(t, pool, "a", inj, w)
	e2, stop2 := faultyEngine(t, pool2, "b", inj, w)
	engines := []*Engine{e1, e2}

	// Clients: start, signal, terminate and enqueue, retrying injected
	// timeouts as a careful caller would.
	var (
		mu      sync.Mutex
		errs    []error
		handles = make([]*Run[int], flows)
		idleIDs []string
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	work := make(chan int)
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			for i := range work {
				e := engines[i%2]
				switch {
				case i < flows:
					id := fmt.Sprintf("flow-%d", i)
					r, _, err := retryInjected(ctx, func() (*Run[int], error) {
						return Start(ctx, e, w.Flow, i, StartOptions{ID: id})
					})
					if err != nil {
						fail(fmt.Errorf("start %s: %w", id, err))
						continue
					}
					handles[i] = r
					_, faults, err := retryInjected(ctx, func() (struct{}, error) {
						return struct{}{}, Signal(ctx, e, id, "bonus", bonus(i))
					})
					// A retry may find the run closed: the signal that
					// timed out was delivered and the run went on to finish.
					if err != nil && !(faults > 0 && errors.Is(err, ErrRunClosed)) {
						fail(fmt.Errorf("signal %s: %w", id, err))
					}
				case i < flows+idles:
					id := fmt.Sprintf("idle-%d", i)
					if _, _, err := retryInjected(ctx, func() (*Run[int], error) {
						return Start(ctx, e, w.Idle, i, StartOptions{ID: id})
					}); err != nil {
						fail(fmt.Errorf("start %s: %w", id, err))
						continue
					}
					_, faults, err := retryInjected(ctx, func() (struct{}, error) {
						return struct{}{}, e.Terminate(ctx, id, "test")
					})
					if err != nil && !(faults > 0 && errors.Is(err, ErrRunClosed)) {
						fail(fmt.Errorf("terminate %s: %w", id, err))
						continue
					}
					mu.Lock()
					idleIDs = append(idleIDs, id)
					mu.Unlock()
				default:
					key := fmt.Sprintf("job-%d", i)
					if _, _, err := retryInjected(ctx, func() (Job, error) {
						return Enqueue(ctx, e, w.Job, i, JobOptions{Key: key})
					}); err != nil {
						fail(fmt.Errorf("enqueue %s: %w", key, err))
					}
				}
			}
		})
	}
	for i := range flows + idles + jobs {
		work <- i
	}
	close(work)
	clients.Wait()
	require.Empty(t, errs, "client calls fail only with injected faults, and retries get through")
	require.Len(t, idleIDs, idles)
	started := time.Since(began)

	// One waiter at a time: most runs are done by the time their turn comes.
	for i, r := range handles {
		got, _, err := retryInjected(ctx, func() (int, error) { return r.Result(ctx) })
		require.NoError(t, err, "result of %s", r.WorkflowID)
		require.Equal(t, flowResult(i), got, "result of %s", r.WorkflowID)
	}
	results := time.Since(began)
	select {
	case <-w.jobsDone:
	case <-ctx.Done():
		t.Fatal("jobs did not all run")
	}
	// Work whose outcome was lost to a fault runs again when its lease
	// ends; wait for the last of it before stopping the engines.
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_workflow_tasks) + (SELECT count(*) FROM durable_activity_tasks)
			+ (SELECT count(*) FROM durable_timers)`).Scan(&n)
		return err == nil && n == 0
	}, 30*time.Second, 50*time.Millisecond, "leases lost to injected faults end, and their work is finished by another attempt")
	stop1()
	stop2()
	elapsed := time.Since(began)

	extraJobs := checkAmbiguousInvariants(t, ctx, pool, inj, w, handles, idleIDs, jobs)

	t.Logf("%d workflows, %d idle runs terminated, %d jobs on two engines in %s (started %s, results %s); faults injected (rate %.0f%% of each kind):\n%s",
		flows, idles, jobs, elapsed.Round(time.Millisecond), started.Round(time.Millisecond), results.Round(time.Millisecond), rate*100, inj.report())
	_, before, after := inj.counts()
	for _, m := range []string{"CreateRun", "SignalRun", "ClaimWorkflowTasks", "CommitWorkflowTask", "FusedStep", "ClaimActivityTasks", "ResolveActivity"} {
		require.Positive(t, before[m], "faults before %s", m)
		require.Positive(t, after[m], "ambiguous commits of %s", m)
	}
	for _, m := range []string{"ListEvents", "GetRun"} {
		require.Positive(t, before[m], "faults of %s", m)
	}
	require.Positive(t, inj.keysDone("EagerStart"), "runs started eagerly, among the faults")
	keys, dups := w.duplicates()
	stale, dropped := 0.0, 0.0
	for _, e := range engines {
		stale += testutil.ToFloat64(e.metrics.staleWrites.WithLabelValues("activity_outcome"))
		dropped += testutil.ToFloat64(e.metrics.runAhead.WithLabelValues(runAheadDropped))
	}
	lost := before["ResolveActivity"] + before["FusedStep"]
	t.Logf("activities: %d keys, %d duplicate successful executions; outcomes (resolves and fused steps) that failed before running: %d, "+
		"outcomes refused for a lost lease: %.0f, attempts run ahead of a schedule that did not commit: %.0f, jobs enqueued again after an ambiguous enqueue: %d",
		keys, dups, lost, stale, dropped, extraJobs)
	require.Equal(t, flows*5+jobs, keys, "every activity and job ran")
	// A successful attempt runs again only if its outcome was not recorded
	// (a resolve or fused step that failed before it ran, an attempt that
	// outlived its lease, or one that ran ahead of a schedule whose commit
	// failed), or, for a job, if it was enqueued again after it finished.
	// An outcome that committed and reported a timeout never runs it again.
	require.LessOrEqual(t, dups, lost+int(stale)+int(dropped)+extraJobs, "every duplicate execution is explained")
}

// checkAmbiguousInvariants checks the database after the workload. It
// returns how many jobs were enqueued again after they had finished.
func checkAmbiguousInvariants(t *testing.T, ctx context.Context, pool *pgxpool.Pool, inj *faultInjector, w *ambWork,
	handles []*Run[int], idleIDs []string, jobs int) (extraJobs int) {
	t.Helper()
	var n int
	for _, q := range []string{
		`SELECT count(*) FROM durable_workflow_tasks`,
		`SELECT count(*) FROM durable_activity_tasks`,
		`SELECT count(*) FROM durable_timers`,
		`SELECT count(*) FROM durable_dead_letters`,
		`SELECT count(*) FROM (SELECT workflow_id FROM durable_runs GROUP BY workflow_id HAVING count(*) > 1) d`,
		// The run's counter and its history agree.
		`SELECT count(*) FROM durable_runs r WHERE r.next_event_id - 1 <>
			(SELECT coalesce(max(event_id), 0) FROM durable_events e WHERE e.run_id = r.run_id)`,
	} {
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		require.Zero(t, n, q)
	}
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM durable_runs`).Scan(&n))
	require.Equal(t, len(handles)+len(idleIDs), n, "one run per workflow ID")

	// A checker engine without faults reads histories and replays them.
	checker, err := New(pool, Options{Logger: ambLogger()})
	require.NoError(t, err)
	w.register(t, checker)

	for i, r := range handles {
		id := r.WorkflowID
		require.Equal(t, 1, inj.doneFor("CreateRun", id), "%s was created once", id)
		run, err := checker.store.GetRunByWorkflowID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, r.RunID, run.RunID, "Start returned the run of %s", id)
		require.Equal(t, "completed", run.Status)
		require.JSONEq(t, strconv.Itoa(flowResult(i)), string(run.Result))
		events, err := checker.store.ListEvents(ctx, run.RunID, 0)
		require.NoError(t, err)
		c := checkHistory(t, id, events)
		require.Len(t, c.scheduled, 5, "%s scheduled five activities", id)
		require.Len(t, c.fired, 1, "%s fired one timer", id)
		require.Equal(t, inj.doneFor("SignalRun", id), c.signals,
			"%s holds one SignalReceived per signal call that committed (a retry after an ambiguous one adds one)", id)
		_, ok := events[len(events)-1].Attributes.(history.WorkflowCompleted)
		require.True(t, ok, "%s ends with workflow_completed", id)
		require.Equal(t, 1, c.closes, "%s closed once", id)
		require.NoError(t, checker.Replay(ctx, history.History{RunID: run.RunID, Events: events}), "%s replays", id)
	}
	for _, id := range idleIDs {
		require.Equal(t, 1, inj.doneFor("CreateRun", id), "%s was created once", id)
		require.Equal(t, 1, inj.doneFor("TerminateRun", id), "%s was terminated once", id)
		run, err := checker.store.GetRunByWorkflowID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "terminated", run.Status)
		events, err := checker.store.ListEvents(ctx, run.RunID, 0)
		require.NoError(t, err)
		c := checkHistory(t, id, events)
		require.Equal(t, 1, c.closes, "%s closed once", id)
		_, ok := events[len(events)-1].Attributes.(history.WorkflowTerminated)
		require.True(t, ok, "%s ends with workflow_terminated", id)
		require.NoError(t, checker.Replay(ctx, history.History{RunID: run.RunID, Events: events}), "%s replays", id)
	}
	for i := range jobs {
		// A job key dedups only while the job is pending: an enqueue retried
		// after a timeout whose job had meanwhile finished enqueues it again.
		key := fmt.Sprintf("job-%d", len(handles)+len(idleIDs)+i)
		created := inj.doneFor("EnqueueJob", key)
		require.GreaterOrEqual(t, created, 1, "job %s was enqueued", key)
		require.LessOrEqual(t, created, 1+inj.ambiguousFor("EnqueueJob", key), "job %s was enqueued again only after an ambiguous enqueue", key)
		extraJobs += created - 1
	}
	return extraJobs
}

// historyCounts is what checkHistory found in a history.
type historyCounts struct {
	scheduled map[int64]bool
	fired     map[int64]bool
	signals   int
	closes    int
}

// checkHistory checks that events are numbered 1..n, start with one
// workflow_started, and record each activity outcome and timer fire at most
// once, for something that was scheduled; nothing follows the close.
func checkHistory(t *testing.T, id string, events []history.Event) historyCounts {
	t.Helper()
	c := historyCounts{scheduled: map[int64]bool{}, fired: map[int64]bool{}}
	resolved := map[int64]bool{}
	timers := map[int64]bool{}
	require.NotEmpty(t, events, id)
	for i, ev := range events {
		require.Equal(t, int64(i+1), ev.ID, "%s: event ids are 1..n", id)
		require.Zero(t, c.closes, "%s: event %d follows the close", id, ev.ID)
		_, started := ev.Attributes.(history.WorkflowStarted)
		require.Equal(t, i == 0, started, "%s: event %d: workflow_started is first and only first", id, ev.ID)
		switch a := ev.Attributes.(type) {
		case history.ActivityScheduled:
			require.False(t, c.scheduled[a.Seq], "%s: activity seq %d scheduled twice", id, a.Seq)
			c.scheduled[a.Seq] = true
		case history.ActivityCompleted:
			require.True(t, c.scheduled[a.Seq], "%s: activity seq %d completed but not scheduled", id, a.Seq)
			require.False(t, resolved[a.Seq], "%s: activity seq %d resolved twice (event %d)", id, a.Seq, ev.ID)
			resolved[a.Seq] = true
		case history.ActivityFailed:
			require.True(t, c.scheduled[a.Seq], "%s: activity seq %d failed but not scheduled", id, a.Seq)
			require.False(t, resolved[a.Seq], "%s: activity seq %d resolved twice (event %d)", id, a.Seq, ev.ID)
			resolved[a.Seq] = true
		case history.TimerStarted:
			require.False(t, timers[a.Seq], "%s: timer seq %d started twice", id, a.Seq)
			timers[a.Seq] = true
		case history.TimerFired:
			require.True(t, timers[a.Seq], "%s: timer seq %d fired but not started", id, a.Seq)
			require.False(t, c.fired[a.Seq], "%s: timer seq %d fired twice", id, a.Seq)
			c.fired[a.Seq] = true
		case history.SignalReceived:
			c.signals++
		case history.WorkflowCompleted, history.WorkflowFailed, history.WorkflowCanceled, history.WorkflowTerminated, history.WorkflowContinuedAsNew:
			c.closes++
		}
	}
	if _, completed := events[len(events)-1].Attributes.(history.WorkflowCompleted); completed {
		for seq := range c.scheduled {
			require.True(t, resolved[seq], "%s: activity seq %d never resolved in a completed run", id, seq)
		}
	}
	return c
}

// TestAmbiguousWriteIsNotAppendedTwice: a workflow-task commit or an
// activity outcome that committed but reported a timeout is not written
// again when its work is taken up anew: the commit's claim token and the
// outcome's attempt no longer hold, so the run's history records each step
// once.
func TestAmbiguousWriteIsNotAppendedTwice(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"CommitWorkflowTask", "ResolveActivity"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pool := pgtest.Pool(t)
			inj := newFaultInjector(0, 0)
			inj.force(method, fateAfter, fateAfter)
			w := newAmbWork(0)
			var tweak []func(*Engine)
			if method == "ResolveActivity" {
				// Without a cache no outcome is fused into a step: each is
				// written by ResolveActivity. With one, a loaded machine
				// finished the activities one after another, each fused,
				// and the forced faults met no ResolveActivity (CI, session 9).
				tweak = append(tweak, func(e *Engine) { e.cache = runcache.New(0) })
			}
			e, stop := faultyEngine(t, pool, "a", inj, w, tweak...)

			const n = 3
			r, err := Start(ctx, e, w.Flow, n, StartOptions{ID: "flow"})
			require.NoError(t, err)
			require.NoError(t, Signal(ctx, e, "flow", "bonus", bonus(n)))
			got, err := r.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, flowResult(n), got)
			stop()

			_, _, after := inj.counts()
			require.Equal(t, 2, after[method], "both forced faults hit a write that committed")
			events, err := e.History(ctx, "flow")
			require.NoError(t, err)
			c := checkHistory(t, "flow", events)
			require.Len(t, c.scheduled, 5)
			require.Equal(t, 1, c.closes)
			require.Equal(t, 1, c.signals)
			require.NoError(t, e.Replay(ctx, history.History{RunID: r.RunID, Events: events}))
		})
	}
}

// TestAmbiguousStartRetryReturnsTheSameRun: Start whose CreateRun committed
// but reported a timeout returns the error; the caller's retry with the same
// workflow ID finds the run it created, open, and returns it (Existing), so
// no second run starts. With RejectIfRunning the retry is refused with
// ErrAlreadyRunning naming that run: the caller cannot tell its own run from
// another's. Once the run has closed, a retry would start a second run.
func TestAmbiguousStartRetryReturnsTheSameRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	inj := newFaultInjector(0, 0)
	w := newAmbWork(0)
	e, _ := faultyEngine(t, pool, "a", inj, w)

	inj.force("CreateRun", fateAfter)
	_, err := Start(ctx, e, w.Flow, 1, StartOptions{ID: "flow"})
	require.True(t, isInjected(err), "the caller sees the timeout: %v", err)
	require.Equal(t, 1, inj.doneFor("CreateRun", "flow"), "the run was created")

	_, err = Start(ctx, e, w.Flow, 1, StartOptions{ID: "flow", RejectIfRunning: true})
	require.ErrorIs(t, err, ErrAlreadyRunning)

	r, err := Start(ctx, e, w.Flow, 1, StartOptions{ID: "flow"})
	require.NoError(t, err)
	require.True(t, r.Existing, "the retry found the run the first call created")
	require.Equal(t, 1, inj.doneFor("CreateRun", "flow"), "no second run")
	require.NoError(t, Signal(ctx, e, "flow", "bonus", bonus(1)))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, flowResult(1), got)
	var runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM durable_runs`).Scan(&runs))
	require.Equal(t, 1, runs)
}

// TestAmbiguousSignalRetryIsDeliveredTwice pins a known limit: a signal
// whose write committed but reported a timeout, sent again by the caller,
// is in history twice. Nothing identifies a signal call, so nothing can
// tell the retry from a second signal; a workflow that must not act twice
// carries an ID in the payload and ignores one it has seen.
func TestAmbiguousSignalRetryIsDeliveredTwice(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	inj := newFaultInjector(0, 0)
	w := newAmbWork(0)
	e, _ := faultyEngine(t, pool, "a", inj, w)

	r, err := Start(ctx, e, w.Idle, 0, StartOptions{ID: "idle"})
	require.NoError(t, err)
	inj.force("SignalRun", fateAfter)
	err = Signal(ctx, e, "idle", "s", 1)
	require.True(t, isInjected(err), "the caller sees the timeout: %v", err)
	require.NoError(t, Signal(ctx, e, "idle", "s", 1), "the caller retries")
	require.NoError(t, e.Terminate(ctx, "idle", "done"))

	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, checkHistory(t, "idle", events).signals, "the signal is in history twice")
}
