package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// runAheadRig is a client that starts runs, so that their first tasks wait
// in the queue, and a worker that claims them, its storage counted.
type runAheadRig struct {
	pool   *pgxpool.Pool
	client *Engine
	worker *Engine
	sc     *stepCounter
	log    *syncbuf.Buffer
}

// newRunAheadRig registers wfs and acts on both engines and runs the
// worker with the run-ahead window window.
func newRunAheadRig(t *testing.T, window time.Duration, wfs []func(workflow.Context, int) (int, error),
	acts ...func(context.Context, int) (int, error)) *runAheadRig {
	t.Helper()
	r := &runAheadRig{pool: pgtest.Pool(t), sc: &stepCounter{}, log: &syncbuf.Buffer{}}
	var err error
	r.client, err = New(r.pool, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	// No backstop poll: a poller claiming holds every free slot of its
	// pool meanwhile, and an activity finds none to run ahead in.
	// Notifications wake the pollers.
	r.worker, err = newOnPool(r.pool, Options{
		Logger: slog.New(slog.NewJSONHandler(r.log, nil)), SkipMigrate: true, PollInterval: time.Hour,
		ActivityRunAhead: window}, func(s store.Store) store.Store { r.sc.Store = s; return r.sc })
	require.NoError(t, err)
	for _, e := range []*Engine{r.client, r.worker} {
		for _, wf := range wfs {
			require.NoError(t, RegisterWorkflow(e, wf, WorkflowOptions{}))
		}
		for _, a := range acts {
			require.NoError(t, RegisterActivity(e, a, activity.Options{Retry: activity.RetryPolicy{InitialInterval: 10 * time.Millisecond}}))
		}
	}
	runUntilTestEnds(t, r.worker)
	require.Eventually(t, func() bool { n := r.sc.snap(); return n.claims > 0 && n.activityClaims > 0 },
		10*time.Second, time.Millisecond, "the pollers' first claims are done")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", r.log.String())
		}
	})
	return r
}

// activityRows is how many activity task rows were ever inserted.
func (r *runAheadRig) activityRows(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	var n int64
	var called bool
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT last_value, is_called FROM durable_activity_tasks_id_seq`).Scan(&n, &called))
	if !called {
		return 0
	}
	return n
}

// addAfterFirstStep starts countedWaitIncr on 1, sends it 100 once its
// first activity has completed in its history, and checks its result.
func (r *runAheadRig) addAfterFirstStep(ctx context.Context, t *testing.T, opts StartOptions) *Run[int] {
	t.Helper()
	run, err := Start(ctx, r.client, countedWaitIncr, 1, opts)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var done bool
		err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM durable_events WHERE run_id = $1 AND type = 'activity_completed')`,
			run.RunID).Scan(&done)
		return err == nil && done
	}, 20*time.Second, time.Millisecond)
	require.NoError(t, Signal(ctx, r.client, run.WorkflowID, "add", 100))
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1+1+100+1, got)
	return run
}

// replayedHistory returns run's history, once it has checked that its
// event IDs are 1..n and that it replays against the worker's code.
func (r *runAheadRig) replayedHistory(ctx context.Context, t *testing.T, run *Run[int]) []history.Event {
	t.Helper()
	events, err := run.History(ctx)
	require.NoError(t, err)
	for i, ev := range events {
		require.Equal(t, int64(i+1), ev.ID)
	}
	require.NoError(t, r.worker.ReplayRun(ctx, run.WorkflowID))
	return events
}

func (r *runAheadRig) runAhead(result string) float64 {
	return testutil.ToFloat64(r.worker.metrics.runAhead.WithLabelValues(result))
}

// A run started elsewhere has its first task claimed from the queue, on a
// history that is on disk: its first activity starts before the task
// commits, and, quick, commits with its schedule and the step after it.
// It never has a task row. Turned off, the same runs take one row per
// activity.
func TestRunAheadCommitsTheOutcomeWithItsSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		window   time.Duration
		merged   int
		rowsEach int64
	}{
		{name: "On", window: 10 * time.Second, merged: 4, rowsEach: 2},
		{name: "Off", window: -1, merged: 0, rowsEach: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRunAheadRig(t, tc.window, []func(workflow.Context, int) (int, error){threeIncrs}, incr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			runs := make([]*Run[int], 4)
			for i := range runs {
				var err error
				runs[i], err = Start(ctx, r.client, threeIncrs, i, StartOptions{})
				require.NoError(t, err)
			}
			requireResults(ctx, t, runs, 3)

			c := r.sc.settled(t, len(runs))
			require.Equal(t, tc.merged, c.merged, "first steps committed with their activity's outcome")
			require.Zero(t, c.mergeRefused)
			require.Equal(t, float64(tc.merged), r.runAhead(runAheadMerged))
			require.Zero(t, r.runAhead(runAheadDropped))
			require.Equal(t, tc.rowsEach*int64(len(runs)), r.activityRows(ctx, t), "activity task rows")
			for _, run := range runs {
				events := r.replayedHistory(ctx, t, run)
				require.Equal(t, []string{"workflow_started",
					"activity_scheduled", "activity_completed", "activity_scheduled", "activity_completed",
					"activity_scheduled", "activity_completed", "workflow_completed"}, typesOf(events))
				require.Equal(t, 1, events[2].Attributes.(history.ActivityCompleted).Attempt)
			}
		})
	}
}

// slowGate holds the activity slowIncr until released.
type slowGate struct {
	started chan struct{}
	release chan struct{}
	beats   chan error
	calls   atomic.Int32
}

var gates sync.Map // workflow ID -> *slowGate

// slowIncr heartbeats at once (before its schedule has committed), waits
// for its gate, heartbeats again and adds one.
func slowIncr(ctx context.Context, n int) (int, error) {
	g, _ := gates.Load(activity.GetInfo(ctx).WorkflowID)
	gate := g.(*slowGate)
	gate.calls.Add(1)
	gate.beats <- activity.RecordHeartbeat(ctx, "early")
	close(gate.started)
	<-gate.release
	gate.beats <- activity.RecordHeartbeat(ctx, "late")
	return n + 1, nil
}

func oneSlowIncr(ctx workflow.Context, n int) (int, error) {
	return workflow.ExecuteActivity(ctx, slowIncr, n).Get(ctx)
}

// An activity that outlasts the window runs on while its schedule commits
// alone, claimed for the slot it runs in; its outcome is recorded when it
// returns. A heartbeat waits for the schedule, then records its details
// in the task.
func TestRunAheadOutlastingTheWindowIsRecordedAfterItsSchedule(t *testing.T) {
	t.Parallel()
	r := newRunAheadRig(t, time.Millisecond, []func(workflow.Context, int) (int, error){oneSlowIncr}, slowIncr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gate := &slowGate{started: make(chan struct{}), release: make(chan struct{}), beats: make(chan error, 2)}
	id := "slow-" + uuid.NewString()
	gates.Store(id, gate)
	run, err := Start(ctx, r.client, oneSlowIncr, 1, StartOptions{ID: id})
	require.NoError(t, err)
	<-gate.started
	require.NoError(t, <-gate.beats, "a heartbeat that waited for the schedule")
	var claimedBy string
	var attempt int
	require.Eventually(t, func() bool {
		err := r.pool.QueryRow(ctx, `SELECT coalesce(locked_by, ''), attempt FROM durable_activity_tasks WHERE run_id = $1`,
			run.RunID).Scan(&claimedBy, &attempt)
		return err == nil
	}, 10*time.Second, time.Millisecond, "the schedule committed while the activity runs")
	require.Equal(t, r.worker.opts.WorkerID, claimedBy, "claimed for the slot it runs in")
	require.Equal(t, 1, attempt)
	var details string
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT heartbeat::text FROM durable_activity_tasks WHERE run_id = $1`, run.RunID).Scan(&details))
	require.JSONEq(t, `"early"`, details, "the first heartbeat's details")
	close(gate.release)
	require.NoError(t, <-gate.beats, "a heartbeat after the schedule committed")
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got)

	require.Equal(t, int32(1), gate.calls.Load(), "one execution")
	require.Equal(t, float64(1), r.runAhead(runAheadRecorded))
	require.Zero(t, r.runAhead(runAheadMerged))
	require.Zero(t, r.sc.snap().merged)
	events := r.replayedHistory(ctx, t, run)
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "workflow_completed"}, typesOf(events))
}

// counted lists the attempts of countedIncr's executions, by run.
var counted sync.Map // run ID -> *[]int, guarded by countedMu

var countedMu sync.Mutex

func countedIncr(ctx context.Context, n int) (int, error) {
	info := activity.GetInfo(ctx)
	countedMu.Lock()
	v, _ := counted.LoadOrStore(info.RunID, &[]int{})
	p := v.(*[]int)
	*p = append(*p, info.Attempt)
	failFirst := strings.HasPrefix(info.WorkflowID, "flaky") && len(*p) == 1
	countedMu.Unlock()
	if failFirst {
		return 0, errors.New("flaky: try again")
	}
	return n + 1, nil
}

func attemptsOf(runID string) []int {
	countedMu.Lock()
	defer countedMu.Unlock()
	v, ok := counted.Load(runID)
	if !ok {
		return nil
	}
	return append([]int(nil), *v.(*[]int)...)
}

// countedWaitIncr adds the "add" signal between two activities.
func countedWaitIncr(ctx workflow.Context, n int) (int, error) {
	return addBetween(ctx, countedIncr, n)
}

// A signal that reaches the run while its activity runs ahead makes the
// commit of the outcome with the schedule refuse, and the schedule's own
// commit too: a decision is only as new as the history it saw. The task
// runs again with the signal, and the activity, whose attempt ran ahead of
// a schedule that did not commit, runs again. What the refused step logged
// is dropped.
func TestRunAheadYieldsToANewEvent(t *testing.T) {
	t.Parallel()
	r := newRunAheadRig(t, 10*time.Second, []func(workflow.Context, int) (int, error){countedWaitIncr}, countedIncr)
	var once sync.Once
	r.sc.beforeMerged = func(ctx context.Context, s store.Store, in store.CommitWorkflowTaskParams) {
		once.Do(func() {
			_, err := s.SignalRun(ctx, store.SignalParams{WorkflowID: in.WorkflowID, Now: in.Now},
				history.SignalReceived{Name: "add", Payload: []byte("100")})
			require.NoError(t, err)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := Start(ctx, r.client, countedWaitIncr, 1, StartOptions{})
	require.NoError(t, err)
	got, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1+1+100+1, got)

	require.Equal(t, []int{1, 1, 1}, attemptsOf(run.RunID), "the first activity twice, attempt 1 both times; the second once")
	c := r.sc.settled(t, 1)
	require.Equal(t, 1, c.mergeRefused, "the signal came first")
	require.Eventually(t, func() bool { return r.runAhead(runAheadDropped) == 1 },
		10*time.Second, time.Millisecond, "the attempt whose schedule did not commit is dropped")
	require.Equal(t, 1, strings.Count(r.log.String(), "first step done"), "logged once:\n%s", r.log.String())
	events := r.replayedHistory(ctx, t, run)
	require.Equal(t, []string{"workflow_started", "signal_received", "activity_scheduled", "activity_completed"}, typesOf(events[:4]))
}

// If the schedule does not commit (here: the task's claim is lost, as
// when its lease runs out), the outcome is dropped, with a line in the
// log, and the activity runs again, attempt 1 again, when the task does.
func TestRunAheadWhoseScheduleDidNotCommitRunsAgain(t *testing.T) {
	t.Parallel()
	r := newRunAheadRig(t, 10*time.Second, []func(workflow.Context, int) (int, error){countedWaitIncr}, countedIncr)
	var once sync.Once
	r.sc.beforeMerged = func(ctx context.Context, _ store.Store, in store.CommitWorkflowTaskParams) {
		once.Do(func() {
			_, err := r.pool.Exec(ctx, `UPDATE durable_workflow_tasks SET token = nextval('durable_task_token'),
				locked_by = NULL, locked_until = NULL, run_after = now() WHERE run_id = $1`, in.RunID)
			require.NoError(t, err)
			require.NoError(t, r.worker.store.Notify(ctx, []store.Note{notify.WorkflowTasks(in.WorkflowQueue)}))
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := r.addAfterFirstStep(ctx, t, StartOptions{})

	require.Equal(t, []int{1, 1, 1}, attemptsOf(run.RunID), "the first activity twice, attempt 1 both times; the second once")
	// The dropped attempt's goroutine counts and logs it once its
	// schedule's commit has returned, which nothing else here waits for.
	require.Eventually(t, func() bool { return strings.Contains(r.log.String(), msgRunAheadDropped) },
		10*time.Second, time.Millisecond, "the dropped attempt logged")
	require.Equal(t, float64(1), r.runAhead(runAheadDropped))
	require.Contains(t, r.log.String(), `"idempotency_key":"`+run.RunID+`:1"`)
	events := r.replayedHistory(ctx, t, run)
	require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "workflow_task_completed",
		"signal_received"}, typesOf(events[:5]), "the task that took the outcome waits for the signal: it made no command")
}

// An attempt that fails within the window is not committed with its
// schedule: the schedule commits, and the failure is recorded and retried
// the ordinary way.
func TestRunAheadFailureIsRetriedTheOrdinaryWay(t *testing.T) {
	t.Parallel()
	r := newRunAheadRig(t, 10*time.Second, []func(workflow.Context, int) (int, error){countedWaitIncr}, countedIncr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := r.addAfterFirstStep(ctx, t, StartOptions{ID: "flaky-" + uuid.NewString()})

	require.Equal(t, []int{1, 2, 1}, attemptsOf(run.RunID))
	require.Equal(t, float64(1), r.runAhead(runAheadRecorded), "the failed attempt")
	events := r.replayedHistory(ctx, t, run)
	require.Equal(t, 2, events[2].Attributes.(history.ActivityCompleted).Attempt)
}

func typesOf(events []history.Event) []string {
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.Type()
	}
	return types
}

// A window as long as half the task's lease is refused: the task holds its
// claim while it waits, and a claim that ran out would drop the outcome.
func TestRunAheadWindowMustBeShortOfTheLease(t *testing.T) {
	t.Parallel()
	err := Options{ActivityRunAhead: 15 * time.Second}.validate()
	require.ErrorContains(t, err, "ActivityRunAhead (15s) must be under half of WorkflowTaskLease (30s)")
	err = Options{ActivityRunAhead: time.Second, WorkflowTaskLease: time.Second}.validate()
	require.ErrorContains(t, err, "ActivityRunAhead (1s) must be under half of WorkflowTaskLease (1s)")
	err = Options{ActivityRunAhead: -1, WorkflowTaskLease: time.Millisecond}.validate()
	require.NoError(t, err, "off")
	require.NoError(t, Options{}.validate(), "the defaults")
}

// A claim with less than half its lease left does not run its activity
// ahead: it may have been taken over already (a task run late), and a
// task that commits nothing must not act first.
func TestRunAheadOnlyOnAFreshClaim(t *testing.T) {
	t.Parallel()
	r := newRunAheadRig(t, 10*time.Second, []func(workflow.Context, int) (int, error){countedWaitIncr}, countedIncr)
	w := r.worker
	lease := w.opts.WorkflowTaskLease
	task := store.WorkflowTask{RunID: uuid.NewString(), WorkflowID: "fresh", Queue: DefaultQueue, Token: 1}
	commit, err := w.commitParams(task, 1, []history.Attributes{history.ActivityScheduled{
		Seq: 1, Activity: "countedIncr", Queue: DefaultQueue, Input: []byte("1"), Options: []byte(`{}`)}}, w.now())
	require.NoError(t, err)

	for _, tt := range []struct {
		name  string
		until time.Time
		ahead bool
	}{
		{name: "no lease known", until: time.Time{}, ahead: false},
		{name: "a third of the lease left", until: w.now().Add(lease / 3), ahead: false},
		{name: "run out", until: w.now().Add(-time.Second), ahead: false},
		{name: "most of the lease left", until: w.now().Add(lease - time.Second), ahead: true},
	} {
		task.LockedUntil = tt.until
		a := w.startRunAhead(task, commit)
		require.Equal(t, tt.ahead, a != nil, tt.name)
		if a != nil {
			a.settle(nil, false) // its schedule "did not commit": the attempt ends
			<-a.finished
		}
	}
}
