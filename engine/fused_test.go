package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// stepCounter counts the engine's step writes and history reads; beforeFused
// and beforeMerged, if set, run before each fused commit and each commit of
// a run-ahead activity's outcome with its schedule.
type stepCounter struct {
	store.Store
	mu           sync.Mutex
	n            stepCounts
	beforeFused  func(ctx context.Context, s store.Store, in store.CommitWorkflowTaskParams)
	beforeMerged func(ctx context.Context, s store.Store, in store.CommitWorkflowTaskParams)
}

// stepCounts are what a stepCounter counted.
type stepCounts struct {
	fused, refused int // fused commits that took effect, and refused
	resolves       int // activity outcomes recorded on their own
	reads          int // history reads
	batchReads     int // reads of the histories of many runs
	eager          int // runs inserted with their first task
	woken          int // tasks a timer fire handed over
	claimed        int // workflow tasks claimed from the queue
	claimedActs    int // activity tasks claimed from the queue
	runReads       int // GetRun calls
	givenBack      int // single activity tasks released (engine.reslot)
	closed         int // runs closed by a workflow task's commit
	claims         int // claims of workflow tasks, whatever they found
	activityClaims int // claims of activity tasks, whatever they found
	merged         int // run-ahead outcomes committed with their schedules
	mergeRefused   int // such commits refused
}

// count changes the counts under the lock.
func (s *stepCounter) count(f func(n *stepCounts)) {
	s.mu.Lock()
	f(&s.n)
	s.mu.Unlock()
}

// snap returns the counts so far.
func (s *stepCounter) snap() stepCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// settled returns the counts once closed closes are among them. A close
// can reach Result (through a notification, or the backstop) before its
// commit returns here to be counted.
func (s *stepCounter) settled(t *testing.T, closed int) stepCounts {
	t.Helper()
	require.Eventually(t, func() bool { return s.snap().closed >= closed }, 10*time.Second, time.Millisecond,
		"%d closes counted", closed)
	return s.snap()
}

func (s *stepCounter) CreateRun(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	r, err := s.Store.CreateRun(ctx, in)
	if in.First != nil && err == nil {
		s.count(func(n *stepCounts) { n.eager++ })
	}
	return r, err
}

func (s *stepCounter) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	if in.Outcome != nil && s.beforeFused != nil {
		s.beforeFused(ctx, s.Store, in)
	}
	merged := in.NextEventID != 0 && in.NextEventID != in.ProcessedEventID+1 // carries the outcome it ran past
	if merged && s.beforeMerged != nil {
		s.beforeMerged(ctx, s.Store, in)
	}
	ready, err := s.Store.CommitWorkflowTask(ctx, in)
	if in.Close != nil && err == nil {
		s.count(func(n *stepCounts) { n.closed++ })
	}
	if merged {
		s.count(func(n *stepCounts) {
			if err == nil {
				n.merged++
			} else {
				n.mergeRefused++
			}
		})
	}
	if in.Outcome != nil {
		s.count(func(n *stepCounts) {
			if err == nil {
				n.fused++
			} else {
				n.refused++
			}
		})
	}
	return ready, err
}

func (s *stepCounter) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	s.count(func(n *stepCounts) { n.resolves++ })
	return s.Store.ResolveActivity(ctx, in)
}

func (s *stepCounter) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	s.count(func(n *stepCounts) { n.reads++ })
	return s.Store.ListEvents(ctx, runID, afterID)
}

func (s *stepCounter) ListEventsOfRuns(ctx context.Context, runIDs []string) (map[string][]history.Event, error) {
	s.count(func(n *stepCounts) { n.batchReads++ })
	return s.Store.ListEventsOfRuns(ctx, runIDs)
}

func (s *stepCounter) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	f, tasks, err := s.Store.FireTimers(ctx, in)
	s.count(func(n *stepCounts) { n.woken += len(tasks) })
	return f, tasks, err
}

func (s *stepCounter) ClaimWorkflowTasks(ctx context.Context, in store.ClaimParams) ([]store.WorkflowTask, error) {
	tasks, err := s.Store.ClaimWorkflowTasks(ctx, in)
	s.count(func(n *stepCounts) { n.claimed += len(tasks); n.claims++ })
	return tasks, err
}

func (s *stepCounter) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	tasks, err := s.Store.ClaimActivityTasks(ctx, in)
	s.count(func(n *stepCounts) { n.claimedActs += len(tasks); n.activityClaims++ })
	return tasks, err
}

func (s *stepCounter) ReleaseActivityTasks(ctx context.Context, in store.ReleaseParams) error {
	if in.TaskID != 0 {
		s.count(func(n *stepCounts) { n.givenBack++ })
	}
	return s.Store.ReleaseActivityTasks(ctx, in)
}

func (s *stepCounter) GetRun(ctx context.Context, runID string) (store.Run, error) {
	s.count(func(n *stepCounts) { n.runReads++ })
	return s.Store.GetRun(ctx, runID)
}

func incr(_ context.Context, n int) (int, error) { return n + 1, nil }

func threeIncrs(ctx workflow.Context, n int) (int, error) {
	for range 3 {
		var err error
		if n, err = workflow.ExecuteActivity(ctx, incr, n).Get(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// incrWaitIncr adds the "add" signal between two activities.
func incrWaitIncr(ctx workflow.Context, n int) (int, error) { return addBetween(ctx, incr, n) }

// addBetween runs act on n, logs, waits for the "add" signal and runs act
// on the sum.
func addBetween(ctx workflow.Context, act func(context.Context, int) (int, error), n int) (int, error) {
	n, err := workflow.ExecuteActivity(ctx, act, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	workflow.Logger(ctx).Info("first step done")
	add, err := workflow.GetSignalChannel[int](ctx, "add").Receive(ctx)
	if err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity(ctx, act, n+add).Get(ctx)
}

// incrWithDeadline gives its first activity an hour, and cancels the
// deadline when it is done: a canceled timer cannot be fused.
func incrWithDeadline(ctx workflow.Context, n int) (int, error) {
	deadline := workflow.NewTimer(ctx, time.Hour)
	n, err := workflow.ExecuteActivity(ctx, incr, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	deadline.Cancel()
	return workflow.ExecuteActivity(ctx, incr, n).Get(ctx)
}

// napLong sleeps for a day: the run leaves the cache while it waits.
func napLong(ctx workflow.Context, n int) (int, error) {
	return n, workflow.Sleep(ctx, 24*time.Hour)
}

// nap is the short sleep of napBoth and napTwice. It outlasts a commit on
// a loaded machine: a timer that comes due before the commit that started
// it returns is fired by the scanner, not woken in the cache.
const nap = 200 * time.Millisecond

// napBoth waits on two timers that come due together.
func napBoth(ctx workflow.Context, n int) (int, error) {
	a, b := workflow.NewTimer(ctx, nap), workflow.NewTimer(ctx, nap)
	if _, err := a.Get(ctx); err != nil {
		return 0, err
	}
	_, err := b.Get(ctx)
	return n, err
}

// napTwice sleeps twice.
func napTwice(ctx workflow.Context, n int) (int, error) {
	for range 2 {
		if err := workflow.Sleep(ctx, nap); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// fusedEngine runs an engine whose storage sc counts the writes and which
// logs to log; set, if given, changes its options.
func fusedEngine(t *testing.T, sc *stepCounter, log *syncbuf.Buffer, set ...func(*Options)) *Engine {
	t.Helper()
	// A first task claimed from the queue (a start before Run serves it)
	// does not run its activity ahead: these tests count fused steps.
	opts := Options{
		Logger: slog.New(slog.NewTextHandler(log, nil)), PollInterval: 100 * time.Millisecond, ActivityRunAhead: -1,
	}
	for _, f := range set {
		f(&opts)
	}
	e, err := newOnPool(pgtest.Pool(t), opts, func(s store.Store) store.Store { sc.Store = s; return sc })
	require.NoError(t, err)
	for _, wf := range []func(workflow.Context, int) (int, error){threeIncrs, incrWaitIncr, incrWithDeadline, napTwice, napLong, napBoth} {
		require.NoError(t, RegisterWorkflow(e, wf, WorkflowOptions{}))
	}
	require.NoError(t, RegisterActivity(e, incr, activity.Options{}))
	runUntilTestEnds(t, e)
	return e
}

// runUntilTestEnds runs e until the test ends.
func runUntilTestEnds(t *testing.T, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
}

// runToEnd starts wf with n, waits for its result, which must be want, and
// returns the run.
func runToEnd(ctx context.Context, t *testing.T, e *Engine, wf func(workflow.Context, int) (int, error), n, want int) *Run[int] {
	t.Helper()
	r, err := Start(ctx, e, wf, n, StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
	return r
}

// Result on an engine that does not run (a client), soon after its Start
// and while the client's LISTEN holds, does not read the run before it
// waits, and takes the outcome from the close's notification: no read at
// all. A worker with a codec announces the close without its outcome (it
// would be encrypted), and the Result reads the run once, after the notice.
func TestClientResultTakesTheOutcomeFromTheNotice(t *testing.T) {
	t.Parallel()
	aes, err := codec.AESGCM(bytes.Repeat([]byte{5}, 32))
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		codec codec.PayloadCodec
		reads int
	}{"plain": {nil, 0}, "codec": {aes, 1}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			worker := fusedEngine(t, &stepCounter{}, &syncbuf.Buffer{}, func(o *Options) { o.Codec = tc.codec })
			sc := &stepCounter{}
			lw := &listenWatch{listening: make(chan struct{})}
			client, err := newOnPool(worker.pg.pool, Options{
				Logger: slog.New(slog.DiscardHandler), SkipMigrate: true, PollInterval: time.Hour, // only a notice ends the wait
				Codec: tc.codec}, func(s store.Store) store.Store { sc.Store = s; lw.Store = sc; return lw })
			require.NoError(t, err)
			require.NoError(t, RegisterWorkflow(client, threeIncrs, WorkflowOptions{}))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client.hub.Acquire() // as another Result waiting here would
			defer client.hub.Release()
			select {
			case <-lw.listening:
			case <-ctx.Done():
				t.Fatal("the client does not listen")
			}

			c0 := sc.snap()
			runToEnd(ctx, t, client, threeIncrs, 1, 4)
			require.Equal(t, tc.reads, sc.snap().runReads-c0.runReads, "reads of the run")
		})
	}
}

// A close note carries the outcome unless a codec encrypts payloads.
func TestCloseNoteLeavesEncryptedOutcomesOut(t *testing.T) {
	t.Parallel()
	c := &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`1`)}
	e := &Engine{}
	require.Equal(t, store.Note{Kind: store.NoteClosed, RunID: "run-1", Close: c}, e.closeNote("run-1", c))
	aes, err := codec.AESGCM(bytes.Repeat([]byte{5}, 32))
	require.NoError(t, err)
	e.opts.Codec = aes
	require.Nil(t, e.closeNote("run-1", c).Close, "a codec: no outcome")
}

// The histories of runs started by a client come with the claim of their
// first tasks: no task reads its own.
func TestClaimBringsFirstTasksHistories(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	client, err := New(pool, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, RegisterWorkflow(client, threeIncrs, WorkflowOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs := make([]*Run[int], 6)
	for i := range runs {
		runs[i], err = Start(ctx, client, threeIncrs, i, StartOptions{})
		require.NoError(t, err)
	}

	sc := &stepCounter{}
	worker, err := newOnPool(pool, Options{Logger: slog.New(slog.DiscardHandler), SkipMigrate: true}, func(s store.Store) store.Store { sc.Store = s; return sc })
	require.NoError(t, err)
	require.NoError(t, RegisterWorkflow(worker, threeIncrs, WorkflowOptions{}))
	require.NoError(t, RegisterActivity(worker, incr, activity.Options{}))
	runUntilTestEnds(t, worker)

	requireResults(ctx, t, runs, 3)
	n := sc.snap()
	require.Equal(t, len(runs), n.claimed, "one claim took the six first tasks")
	require.Zero(t, n.batchReads, "the claim brought the histories")
	require.Zero(t, n.reads, "no task read its own history")
}

// The histories of the runs a claim takes past their first tasks that are
// not cached (here: their engine stopped) are read in one statement, not
// one per task.
func TestClaimReadsUncachedHistoriesTogether(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	newWorker := func(wrap func(store.Store) store.Store) *Engine {
		e, err := newOnPool(pool, Options{Logger: slog.New(slog.DiscardHandler)}, wrap)
		require.NoError(t, err)
		require.NoError(t, RegisterWorkflow(e, incrWaitIncr, WorkflowOptions{}))
		require.NoError(t, RegisterActivity(e, incr, activity.Options{}))
		return e
	}
	first := newWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs := make([]*Run[int], 6)
	for i := range runs {
		var err error
		runs[i], err = Start(ctx, first, incrWaitIncr, i, StartOptions{})
		require.NoError(t, err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(rctx) }()
	for _, r := range runs {
		require.Eventually(t, func() bool { // the first step is done: the run waits for "add" (a task with no command)
			events, err := r.History(ctx)
			return err == nil && len(events) == 4
		}, 20*time.Second, 5*time.Millisecond)
	}
	stop()
	require.NoError(t, <-done)
	for _, r := range runs {
		require.NoError(t, Signal(ctx, first, r.WorkflowID, "add", 10))
	}

	sc := &stepCounter{}
	second := newWorker(func(s store.Store) store.Store { sc.Store = s; return sc })
	runUntilTestEnds(t, second)
	requireResults(ctx, t, runs, 12)
	n := sc.snap()
	require.Equal(t, len(runs), n.claimed, "one claim took the six tasks")
	require.Equal(t, 1, n.batchReads)
	require.Zero(t, n.reads, "no task read its own history")
}

// requireResults waits for each run's result, which must be its index
// plus add.
func requireResults(ctx context.Context, t *testing.T, runs []*Run[int], add int) {
	t.Helper()
	for i, r := range runs {
		got, err := r.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, i+add, got)
	}
}

// A run started by an engine that runs it is inserted with its first
// task's commands, and then, in the cache of the engine that ran its
// activity, takes each step in one write: the outcome and the next workflow
// task, the close included. Nothing reads the history back.
func TestCachedStepsAreFused(t *testing.T) {
	t.Parallel()
	sc := &stepCounter{}
	// The backstop (every PollInterval) asks which waited runs have closed;
	// run between a close's commit and its delivery here, it would wake
	// Result to read the run. It stays out of the way of this count.
	e := fusedEngine(t, sc, &syncbuf.Buffer{}, func(o *Options) { o.PollInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(n int) *Run[int] { return runToEnd(ctx, t, e, threeIncrs, n, n+3) }
	// The first run may start before Run serves the queue: its first task
	// is then claimed, and read from history.
	run(0)
	c0 := sc.settled(t, 1)
	r := run(10)
	c := sc.settled(t, 2)
	require.Equal(t, c0.eager+1, c.eager, "the start carried the first task's commands")
	require.Equal(t, c0.runReads, c.runReads, "Result learned the result in-process, watching since the start")
	require.Equal(t, 3, c.fused-c0.fused, "two steps and the close")
	require.Equal(t, c0.refused, c.refused)
	require.Equal(t, c0.resolves, c.resolves, "no outcome on its own")
	require.Equal(t, c0.reads, c.reads, "no history read")
	events, err := r.History(ctx)
	require.NoError(t, err)
	for i, ev := range events {
		require.Equal(t, int64(i+1), ev.ID)
	}
	require.Equal(t, []string{"workflow_started",
		"activity_scheduled", "activity_completed", "activity_scheduled", "activity_completed",
		"activity_scheduled", "activity_completed", "workflow_completed"}, typesOf(events))
	require.NoError(t, e.ReplayRun(ctx, r.WorkflowID), "the fused history replays")
}

// A signal that reaches the run while its activity runs makes the fused
// write refuse; the outcome is then recorded on its own and the run goes on
// from its history, signal included. What the refused step logged is
// dropped: the line is logged once, by the step that took effect.
func TestFusedStepYieldsToANewEvent(t *testing.T) {
	t.Parallel()
	sc := &stepCounter{}
	var once sync.Once
	sc.beforeFused = func(ctx context.Context, s store.Store, in store.CommitWorkflowTaskParams) {
		once.Do(func() {
			_, err := s.SignalRun(ctx, store.SignalParams{WorkflowID: in.WorkflowID, Now: in.Now},
				history.SignalReceived{Name: "add", Payload: []byte("100")})
			require.NoError(t, err)
		})
	}
	log := &syncbuf.Buffer{}
	e := fusedEngine(t, sc, log)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Start(ctx, e, incrWaitIncr, 1, StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1+1+100+1, got)

	c := sc.settled(t, 1)
	require.Equal(t, 1, c.refused, "the step after the signal")
	require.Equal(t, 1, c.resolves, "its outcome, on its own")
	require.Equal(t, 1, c.fused, "the close")
	require.Equal(t, 1, strings.Count(log.String(), "first step done"), "logged once:\n%s", log.String())
	require.NoError(t, e.ReplayRun(ctx, r.WorkflowID))
}

// A step whose commands cannot be fused (a timer's cancellation) records
// the outcome, then commits the commands the cached run produced, without
// reading history.
func TestUnfusableStepTakesTwoWrites(t *testing.T) {
	t.Parallel()
	sc := &stepCounter{}
	e := fusedEngine(t, sc, &syncbuf.Buffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Start(ctx, e, incrWithDeadline, 5, StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, got)

	c := sc.settled(t, 1)
	require.Equal(t, 1, c.resolves, "the outcome before the cancellation")
	require.Zero(t, c.refused)
	require.Equal(t, 1, c.fused, "the close")
	events, err := r.History(ctx)
	require.NoError(t, err)
	require.Equal(t, "activity_completed", events[3].Type())
	require.Equal(t, "timer_canceled", events[4].Type(), "the cached run's command, committed after the outcome (event 4)")
	require.NoError(t, e.ReplayRun(ctx, r.WorkflowID))
}

// A run whose first task starts a timer is inserted with it (an eager
// start), and a timer that comes due on the engine that has its run cached
// wakes it there: the firing and the run's next commands are one fused
// write. No claim, no history read, no workflow task, from start to end.
func TestFiredTimerWakesTheCachedRun(t *testing.T) {
	t.Parallel()
	sc := &stepCounter{}
	e := fusedEngine(t, sc, &syncbuf.Buffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(n int) *Run[int] { return runToEnd(ctx, t, e, napTwice, n, n) }
	run(0) // may start before Run serves the queue
	c0 := sc.settled(t, 1)
	r := run(1)
	c := sc.settled(t, 2)
	require.Equal(t, c0.eager+1, c.eager, "the start carried the first timer")
	require.Equal(t, c0.fused+2, c.fused, "each wake, the second with the close")
	require.Equal(t, c0.refused, c.refused)
	require.Equal(t, c0.woken, c.woken, "no fire handed the run over")
	require.Equal(t, c0.claimed, c.claimed, "no claim")
	require.Equal(t, c0.reads, c.reads, "no history read")
	require.NoError(t, e.ReplayRun(ctx, r.WorkflowID), "the history replays")
}

// A timer of a run that is not in the cache is fired by the scanner, which
// claims the woken task for its own engine and hands it over: no claim.
func TestFiredTimerHandsTheTaskToItsEngine(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64 // the clock jumps a day ahead, each try
	sc := &stepCounter{}
	e := fusedEngine(t, sc, &syncbuf.Buffer{}, func(o *Options) {
		o.NowFunc = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		// No poll meanwhile: a poller claiming holds the free slots, and a
		// fire then has none to hand the task to (it is claimed instead).
		o.PollInterval = time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Past the engine's start, when the poller's first claim holds the
	// free slots.
	warm, err := Start(ctx, e, napTwice, 0, StartOptions{})
	require.NoError(t, err)
	_, err = warm.Result(ctx)
	require.NoError(t, err)
	// A poller that claims just then holds the free slots, and the task is
	// claimed instead of handed over: correct, but not what is tested here.
	// It is rare (about once in 1,500 runs on a loaded machine), so a
	// second try must hand it over.
	for try := 1; ; try++ {
		r, err := Start(ctx, e, napLong, 3, StartOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			d, err := e.Describe(ctx, r.WorkflowID)
			return err == nil && len(d.PendingTimers) == 1
		}, 10*time.Second, 5*time.Millisecond, "the run sleeps")
		c0 := sc.snap()

		skew.Add(int64(25 * time.Hour))
		e.hub.Publish(notify.Timers) // the scanner looks again, a day later
		got, err := r.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, got)
		c := sc.snap()
		require.Equal(t, c0.woken+c0.claimed+1, c.woken+c.claimed, "one task, handed over or claimed")
		if c.claimed > c0.claimed && try < 3 {
			t.Logf("try %d: the task was claimed, not handed over; again", try)
			continue
		}
		require.Equal(t, c0.woken+1, c.woken, "the fire handed the task over (claimed %d -> %d)", c0.claimed, c.claimed)
		require.Equal(t, c0.claimed, c.claimed, "no claim")
		return
	}
}

// Two timers of a cached run that come due together wake it twice, one
// after the other, each in one fused write.
func TestTimersDueTogetherWakeTheCachedRunInTurn(t *testing.T) {
	t.Parallel()
	sc := &stepCounter{}
	e := fusedEngine(t, sc, &syncbuf.Buffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runToEnd(ctx, t, e, napBoth, 0, 0) // may start before Run serves the queue
	c0 := sc.settled(t, 1)
	r := runToEnd(ctx, t, e, napBoth, 1, 1)
	c := sc.settled(t, 2)
	require.Equal(t, c0.fused+2, c.fused, "a wake per timer, the second with the close")
	require.Equal(t, c0.woken, c.woken, "no fire handed the run over")
	require.Equal(t, c0.claimed, c.claimed, "no claim")
	require.NoError(t, e.ReplayRun(ctx, r.WorkflowID))
}

// listenWatch closes listening once its store's Listen listens.
type listenWatch struct {
	store.Store
	listening chan struct{}
	once      sync.Once
}

func (s *listenWatch) Listen(ctx context.Context, onListen func(), deliver func(store.Note)) error {
	return s.Store.Listen(ctx, func() {
		onListen()
		s.once.Do(func() { close(s.listening) })
	}, deliver)
}
