package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// Square is an activity.
func Square(_ context.Context, n int) (int, error) { return n * n, nil }

// SumOfSquares schedules one activity per number, all at once, then waits
// for each future in turn: the activities run in parallel on the workers.
func SumOfSquares(ctx workflow.Context, ns []int) (int, error) {
	var futures []workflow.Future[int]
	for _, n := range ns {
		futures = append(futures, workflow.ExecuteActivity(ctx, Square, n))
	}
	sum := 0
	for _, f := range futures {
		sq, err := f.Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += sq
	}
	return sum, nil
}

func ExampleExecuteActivity() {
	eng, stop := exampleEngine(func(eng *engine.Engine) error {
		return errors.Join(
			engine.RegisterWorkflow(eng, SumOfSquares, engine.WorkflowOptions{}),
			engine.RegisterActivity(eng, Square, activity.Options{}),
		)
	})
	defer stop()
	fmt.Println(runToEnd(eng, SumOfSquares, []int{1, 2, 3, 4}))
	// Output:
	// 30 <nil>
}

// Flaky fails every attempt.
func Flaky(ctx context.Context, _ string) (string, error) {
	return "", fmt.Errorf("attempt %d: service unavailable", activity.GetInfo(ctx).Attempt)
}

// TryThrice calls Flaky with per-call options and handles its final failure.
func TryThrice(ctx workflow.Context, _ string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, activity.Options{
		Retry: activity.RetryPolicy{MaximumAttempts: 3, InitialInterval: time.Millisecond},
	})
	_, err := workflow.ExecuteActivity(ctx, Flaky, "").Get(ctx)
	if ae, ok := errors.AsType[*workflow.ActivityError](err); ok {
		return fmt.Sprintf("gave up after %d attempts: %s", ae.Attempts, ae.Message), nil
	}
	return "", err
}

func ExampleWithActivityOptions() {
	eng, stop := exampleEngine(func(eng *engine.Engine) error {
		return errors.Join(
			engine.RegisterWorkflow(eng, TryThrice, engine.WorkflowOptions{}),
			engine.RegisterActivity(eng, Flaky, activity.Options{}), // default: 10 attempts
		)
	})
	defer stop()
	fmt.Println(runToEnd(eng, TryThrice, ""))
	// Output:
	// gave up after 3 attempts: attempt 3: service unavailable <nil>
}

// Greet is an activity.
func Greet(_ context.Context, name string) (string, error) { return "hello " + name, nil }

// Fanout runs one coroutine per name. The coroutines take turns, in the order
// they were started, and hand their results over a workflow.Channel.
func Fanout(ctx workflow.Context, names []string) ([]string, error) {
	type result struct {
		greeting string
		err      error
	}
	results := workflow.NewBufferedChannel[result](ctx, len(names))
	for _, name := range names {
		workflow.Go(ctx, func(ctx workflow.Context) {
			g, err := workflow.ExecuteActivity(ctx, Greet, name).Get(ctx)
			results.Send(ctx, result{g, err})
		})
	}
	var out []string
	for range names {
		r, _ := results.Receive(ctx)
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, r.greeting)
	}
	slices.Sort(out) // arrival order depends on the activities; sort to be sure
	return out, nil
}

func ExampleGo() {
	eng, stop := exampleEngine(func(eng *engine.Engine) error {
		return errors.Join(
			engine.RegisterWorkflow(eng, Fanout, engine.WorkflowOptions{}),
			engine.RegisterActivity(eng, Greet, activity.Options{}),
		)
	})
	defer stop()
	fmt.Println(runToEnd(eng, Fanout, []string{"grace", "ada", "edsger"}))
	// Output:
	// [hello ada hello edsger hello grace] <nil>
}

// Ask is an activity that answers quickly.
func Ask(_ context.Context, q string) (string, error) { return "yes to " + q, nil }

// AskWithDeadline waits for the activity or for an hour, whichever comes
// first, and cancels the timer that lost.
func AskWithDeadline(ctx workflow.Context, q string) (string, error) {
	answer := workflow.ExecuteActivity(ctx, Ask, q)
	deadline := workflow.NewTimer(ctx, time.Hour)
	var out string
	var err error
	workflow.NewSelector(ctx).
		AddFuture(answer, func() { out, err = answer.Get(ctx) }).
		AddFuture(deadline, func() { out = "no answer within the hour" }).
		Select(ctx)
	deadline.Cancel() // does nothing if it fired
	return out, err
}

func ExampleSelector() {
	eng, stop := exampleEngine(func(eng *engine.Engine) error {
		return errors.Join(
			engine.RegisterWorkflow(eng, AskWithDeadline, engine.WorkflowOptions{}),
			engine.RegisterActivity(eng, Ask, activity.Options{}),
		)
	})
	defer stop()
	fmt.Println(runToEnd(eng, AskWithDeadline, "lunch"))
	// Output:
	// yes to lunch <nil>
}

// Remind sleeps durably between two log lines. While it sleeps the run
// leaves memory; when the timer fires, the run is rebuilt by replaying its
// history, and the first line, logged during replay, is dropped.
func Remind(ctx workflow.Context, name string) (string, error) {
	log := workflow.Logger(ctx)
	log.Info("reminder set", "name", name)
	if err := workflow.Sleep(ctx, 50*time.Millisecond); err != nil {
		return "", err
	}
	log.Info("reminding", "name", name)
	return "reminded " + name, nil
}

func ExampleSleep() {
	eng, stop := exampleEngineWithLogger(slog.New(workflowLines{w: os.Stdout}), func(eng *engine.Engine) error {
		return engine.RegisterWorkflow(eng, Remind, engine.WorkflowOptions{})
	})
	defer stop()
	fmt.Println(runToEnd(eng, Remind, "ada"))
	// Output:
	// INFO reminder set name=ada
	// INFO reminding name=ada
	// reminded ada <nil>
}

// NewOrderID draws a random ID once; replay returns the recorded one.
func NewOrderID(ctx workflow.Context, _ string) (string, error) {
	id := workflow.SideEffect(ctx, func() string { return fmt.Sprintf("%016x", rand.Uint64()) })
	// Sleeping evicts the run from memory, so the rest runs after a replay
	// that calls SideEffect again: it returns the recorded ID.
	if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
		return "", err
	}
	return id, nil
}

func ExampleSideEffect() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, stop := exampleEngine(func(eng *engine.Engine) error {
		return engine.RegisterWorkflow(eng, NewOrderID, engine.WorkflowOptions{})
	})
	defer stop()
	run, err := engine.Start(ctx, eng, NewOrderID, "", engine.StartOptions{})
	if err != nil {
		panic(err)
	}
	id, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	events, err := run.History(ctx)
	if err != nil {
		panic(err)
	}
	var recorded string
	for _, ev := range events {
		if se, ok := ev.Attributes.(history.SideEffectRecorded); ok {
			if err := json.Unmarshal(se.Value, &recorded); err != nil {
				panic(err)
			}
		}
	}
	fmt.Println("result is the recorded value:", id == recorded, len(id))
	// Output:
	// result is the recorded value: true 16
}

// runToEnd starts wf with input in and waits for its result.
func runToEnd[In, Out any](eng *engine.Engine, wf func(workflow.Context, In) (Out, error), in In) (Out, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := engine.Start(ctx, eng, wf, in, engine.StartOptions{})
	if err != nil {
		var zero Out
		return zero, err
	}
	return run.Result(ctx)
}

// exampleEngine returns a running engine on a database of its own, with the
// functions that register adds. stop stops the engine, closes the pool and
// drops the database.
func exampleEngine(register func(*engine.Engine) error) (eng *engine.Engine, stop func()) {
	return exampleEngineWithLogger(slog.New(slog.DiscardHandler), register)
}

func exampleEngineWithLogger(logger *slog.Logger, register func(*engine.Engine) error) (*engine.Engine, func()) {
	pool, drop := pgtest.ExamplePool()
	// A short backstop poll keeps ExampleWithActivityOptions quick: a retried
	// activity is picked up at the next poll (default every 5s), not at once.
	eng, err := engine.New(pool, engine.Options{Logger: logger, PollInterval: 100 * time.Millisecond})
	if err == nil {
		err = register(eng)
	}
	if err != nil {
		drop()
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	return eng, func() {
		cancel()
		err := <-done
		drop()
		if err != nil {
			panic(err)
		}
	}
}

// workflowLines is a slog handler that prints the records of workflow
// loggers (those that carry a run's identity) as "LEVEL message attrs", and
// drops the engine's own records and the identity, whose IDs vary.
type workflowLines struct {
	w          io.Writer
	inWorkflow bool
}

func (h workflowLines) Enabled(context.Context, slog.Level) bool { return true }

func (h workflowLines) Handle(_ context.Context, r slog.Record) error {
	if !h.inWorkflow {
		return nil
	}
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	_, err := fmt.Fprintln(h.w, line)
	return err
}

func (h workflowLines) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "run_id" {
			h.inWorkflow = true
		}
	}
	return h
}

func (h workflowLines) WithGroup(string) slog.Handler { return h }
