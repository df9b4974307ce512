package saga_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/saga"
	"github.com/durable-go/durable/workflow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// shop is the activities of the test workflow. It records every execution,
// so tests can count them; each test has its own.
type shop struct {
	mu   sync.Mutex
	runs []string
}

// step is one forward step, or its compensation.
type step struct {
	Name string
	// Fail makes the step (or, given to a compensation, the compensation)
	// fail permanently.
	Fail bool
	// Late puts the step's compensation on the "late" queue.
	Late bool
}

func (s *shop) record(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, what)
}

// executions returns what ran, in order.
func (s *shop) executions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.runs)
}

func (s *shop) Do(_ context.Context, st step) (string, error) {
	s.record("do " + st.Name)
	if st.Fail {
		return "", activity.Permanent(fmt.Errorf("%s refused", st.Name))
	}
	return st.Name + " done", nil
}

func (s *shop) Undo(_ context.Context, st step) (string, error) {
	s.record("undo " + st.Name)
	if st.Fail {
		return "", activity.Permanent(fmt.Errorf("undo %s refused", st.Name))
	}
	return st.Name + " undone", nil
}

// UndoLate is Undo registered on the "late" queue.
func (s *shop) UndoLate(ctx context.Context, st step) (string, error) {
	return s.Undo(ctx, st)
}

// plan is the test workflow's input: run Steps in order, the one named
// FailAt failing; the compensations named in FailUndo fail too.
type plan struct {
	Steps    []string
	FailAt   string
	FailUndo []string
	Late     []string
	Options  saga.Options
}

// report describes, from inside the workflow, the error Fail returned.
type report struct {
	Completed     bool
	Err           string
	CauseActivity string
	CauseClass    string
	Compensations []string
	NotRun        int
	IsNotRun      bool
}

// Flow runs the plan's steps with a saga and reports what Fail returned.
func Flow(ctx workflow.Context, p plan) (report, error) {
	var a *shop
	s := saga.New(p.Options)
	for _, name := range p.Steps {
		if _, err := workflow.ExecuteActivity(ctx, a.Do, step{Name: name, Fail: name == p.FailAt}).Get(ctx); err != nil {
			return describe(s.Fail(ctx, err)), nil
		}
		undo := step{Name: name, Fail: slices.Contains(p.FailUndo, name)}
		if slices.Contains(p.Late, name) {
			saga.AddCompensation(s, a.UndoLate, undo)
		} else {
			saga.AddCompensation(s, a.Undo, undo)
		}
	}
	return report{Completed: true}, nil
}

func describe(err error) report {
	r := report{Err: err.Error(), IsNotRun: errors.Is(err, saga.ErrNotRun)}
	if ae, ok := errors.AsType[*workflow.ActivityError](err); ok {
		r.CauseActivity, r.CauseClass = ae.Activity, ae.Class
	}
	if se, ok := errors.AsType[*saga.Error](err); ok {
		for _, c := range se.Compensations {
			r.Compensations = append(r.Compensations, c.Error())
			if errors.Is(c, saga.ErrNotRun) {
				r.NotRun++
			}
		}
	}
	return r
}

func register(t *testing.T, e *engine.Engine, s *shop) {
	t.Helper()
	require.NoError(t, errors.Join(
		engine.RegisterWorkflow(e, Flow, engine.WorkflowOptions{}),
		engine.RegisterActivity(e, s.Do, activity.Options{}),
		engine.RegisterActivity(e, s.Undo, activity.Options{}),
		engine.RegisterActivity(e, s.UndoLate, activity.Options{Queue: "late"}),
	))
}

type bundle struct {
	env  *durabletest.Env
	shop *shop
	ctx  context.Context
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupWith(t, durabletest.Options{})
}

// setupWith is setup with the environment's options o.
func setupWith(t *testing.T, o durabletest.Options) bundle {
	t.Helper()
	env := durabletest.New(t, o)
	s := &shop{}
	register(t, env.Engine, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return bundle{env: env, shop: s, ctx: ctx}
}

// run runs the plan to its end and returns the workflow's report and history.
func (b bundle) run(t *testing.T, id string, p plan) (report, []history.Event) {
	t.Helper()
	b.env.Run()
	r, err := engine.Start(b.ctx, b.env.Engine, Flow, p, engine.StartOptions{ID: id})
	require.NoError(t, err)
	rep, err := r.Result(b.ctx)
	require.NoError(t, err)
	h, err := r.History(b.ctx)
	require.NoError(t, err)
	return rep, h
}

var fourSteps = []string{"a", "b", "c", "d"}

func TestCompensatesInReverseOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, _ := b.run(t, "reverse", plan{Steps: fourSteps, FailAt: "d"})

	require.Equal(t, []string{"do a", "do b", "do c", "do d", "undo c", "undo b", "undo a"}, b.shop.executions())
	require.Equal(t, report{
		Err:           "activity Do failed after 1 attempt(s) (permanent): d refused; compensated",
		CauseActivity: "Do", CauseClass: "permanent",
	}, rep)
}

func TestFailBeforeAnyStepSucceededCompensatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, _ := b.run(t, "first", plan{Steps: fourSteps, FailAt: "a"})

	require.Equal(t, []string{"do a"}, b.shop.executions())
	require.Equal(t, "Do", rep.CauseActivity)
	require.Empty(t, rep.Compensations)
}

func TestSucceededSagaRunsNoCompensation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, _ := b.run(t, "ok", plan{Steps: fourSteps})

	require.True(t, rep.Completed)
	require.Equal(t, []string{"do a", "do b", "do c", "do d"}, b.shop.executions())
}

func TestParallelStartsEveryCompensationAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, h := b.run(t, "parallel", plan{Steps: fourSteps, FailAt: "d", Options: saga.Options{Parallel: true}})

	require.ElementsMatch(t, []string{"undo a", "undo b", "undo c"}, b.shop.executions()[4:])
	require.Equal(t, "Do", rep.CauseActivity)
	require.Empty(t, rep.Compensations)

	// All three compensations were scheduled in one workflow task: no
	// outcome arrived between the first and the last.
	var kinds []string
	for _, ev := range h {
		switch a := ev.Attributes.(type) {
		case history.ActivityScheduled:
			if a.Activity == "Undo" {
				kinds = append(kinds, "scheduled")
			}
		case history.ActivityCompleted:
			if len(kinds) > 0 {
				kinds = append(kinds, "completed")
			}
		}
	}
	require.Equal(t, []string{"scheduled", "scheduled", "scheduled", "completed", "completed", "completed"}, kinds)
}

func TestFailingCompensation(t *testing.T) {
	t.Parallel()
	undoB := "activity Undo failed after 1 attempt(s) (permanent): undo b refused"
	for _, tt := range []struct {
		name     string
		opts     saga.Options
		wantRuns []string
		wantErrs []string
	}{
		{
			name:     "stops at the first failure",
			opts:     saga.Options{},
			wantRuns: []string{"undo c", "undo b"},
			wantErrs: []string{undoB, "compensation 3 of 3 (Undo): not run: an earlier compensation failed"},
		},
		{
			name:     "ContinueOnError runs the rest",
			opts:     saga.Options{ContinueOnError: true},
			wantRuns: []string{"undo c", "undo b", "undo a"},
			wantErrs: []string{undoB},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rep, _ := b.run(t, "failing-undo", plan{Steps: fourSteps, FailAt: "d", FailUndo: []string{"b"}, Options: tt.opts})

			require.Equal(t, tt.wantRuns, b.shop.executions()[4:])
			require.Equal(t, tt.wantErrs, rep.Compensations)
			// The *saga.Error carries both: errors.As finds the failed step
			// (the cause comes first), and the message names both.
			require.Equal(t, "Do", rep.CauseActivity, "errors.As sees the cause")
			require.Contains(t, rep.Err, "d refused; compensation failed: "+undoB)
			require.Equal(t, len(tt.wantErrs)-1, rep.NotRun)
			require.Equal(t, rep.NotRun > 0, rep.IsNotRun, "errors.Is sees the compensations")
		})
	}
}

func TestErrorUnwrapsCauseThenCompensations(t *testing.T) {
	t.Parallel()
	cause := errors.New("ship refused")
	refund := errors.New("refund refused")
	err := error(&saga.Error{Cause: fmt.Errorf("ship: %w", cause), Compensations: []error{refund}})

	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, err, refund)
	require.EqualError(t, err, "ship: ship refused; compensation failed: refund refused")
	require.EqualError(t, &saga.Error{Cause: cause}, "ship refused; compensated")
}

func TestCompensateEmptiesTheStack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	twice := func(ctx workflow.Context, _ struct{}) (int, error) {
		var a *shop
		s := saga.New(saga.Options{})
		saga.AddCompensation(s, a.Undo, step{Name: "x"})
		if err := s.Compensate(ctx); err != nil {
			return 0, err
		}
		return 0, s.Compensate(ctx) // nothing left to run
	}
	require.NoError(t, engine.RegisterWorkflow(b.env.Engine, twice, engine.WorkflowOptions{Name: "Twice"}))
	b.env.Run()
	r, err := engine.Start(b.ctx, b.env.Engine, twice, struct{}{}, engine.StartOptions{})
	require.NoError(t, err)
	_, err = r.Result(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"undo x"}, b.shop.executions())
}

// TestCrashHalfwayResumesWithoutRepeating stops the engine after the first
// of two compensations completed and finishes the run on a new engine on
// the same database, which replays the history: every step and every
// compensation runs exactly once. The second compensation is on a queue
// the first engine does not poll, so the first engine cannot run it before
// it stops.
func TestCrashHalfwayResumesWithoutRepeating(t *testing.T) {
	t.Parallel()
	// The first engine polls only "default": without Options.Queues it
	// would serve "late" too, the queue its registrations name.
	b := setupWith(t, durabletest.Options{Store: durabletest.Postgres, Engine: engine.Options{Queues: map[string]engine.QueueOptions{"default": {}}}})
	p := plan{Steps: []string{"a", "b", "c"}, FailAt: "c", Late: []string{"a"}}

	ctx1, stop := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.env.Engine.Run(ctx1) }()
	r, err := engine.Start(b.ctx, b.env.Engine, Flow, p, engine.StartOptions{ID: "crash"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Contains(b.shop.executions(), "undo b") && completed(t, b, r.RunID) == 3
	}, 20*time.Second, 5*time.Millisecond, "the first engine completes the first compensation")
	stop()
	require.NoError(t, <-done)
	require.Equal(t, []string{"do a", "do b", "do c", "undo b"}, b.shop.executions(), "the first engine stopped halfway")

	e2, err := engine.New(b.env.Pool, engine.Options{
		Queues:  map[string]engine.QueueOptions{"default": {}, "late": {}},
		NowFunc: b.env.Clock.Now,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	register(t, e2, b.shop)
	ctx2, stop2 := context.WithCancel(b.ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- e2.Run(ctx2) }()
	t.Cleanup(func() {
		stop2()
		require.NoError(t, <-done2)
	})

	r2, err := engine.GetRun[report](b.ctx, e2, "crash")
	require.NoError(t, err)
	require.Equal(t, r.RunID, r2.RunID)
	rep, err := r2.Result(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "Do", rep.CauseActivity)
	require.Empty(t, rep.Compensations)
	require.Equal(t, []string{"do a", "do b", "do c", "undo b", "undo a"}, b.shop.executions(),
		"each step and each compensation ran exactly once")
}

// completed counts the ActivityCompleted events of a run.
func completed(t *testing.T, b bundle, runID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(b.ctx,
		`SELECT count(*) FROM durable_events WHERE run_id = $1 AND type = 'activity_completed'`, runID).Scan(&n))
	return n
}
