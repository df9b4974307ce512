package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/benchkit"
	"github.com/durable-go/durable/workflow"
)

// Loop is W4's workflow: it calls Noop n times in a row, so a finished run
// has 2n+2 events.
func Loop(ctx workflow.Context, n int) (int, error) {
	x := 0
	for range n {
		var err error
		if x, err = workflow.ExecuteActivity(ctx, Noop, x).Get(ctx); err != nil {
			return 0, err
		}
	}
	return x, nil
}

// loopHistory builds in memory the history that a Loop run of n steps
// records: workflow_started, activity_scheduled and activity_completed n
// times, workflow_completed.
func loopHistory(n int) (history.History, error) {
	opts, err := json.Marshal(activity.Options{Name: "Noop"}.WithDefaults())
	if err != nil {
		return history.History{}, err
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	num := func(x int) json.RawMessage { return json.RawMessage(strconv.Itoa(x)) }
	attrs := make([]history.Attributes, 0, 2*n+2)
	attrs = append(attrs, history.WorkflowStarted{WorkflowType: "Loop", WorkflowID: "bench-replay", Queue: engine.DefaultQueue, Input: num(n), Attempt: 1})
	for i := 1; i <= n; i++ {
		attrs = append(attrs,
			history.ActivityScheduled{Seq: int64(i), Activity: "Noop", Queue: engine.DefaultQueue, Input: num(i - 1), Options: opts},
			history.ActivityCompleted{Seq: int64(i), Result: num(i), Attempt: 1})
	}
	attrs = append(attrs, history.WorkflowCompleted{Result: num(n)})
	h := history.History{Version: history.FormatVersion, WorkflowID: "bench-replay", RunID: "00000000-0000-4000-8000-000000000000", WorkflowType: "Loop"}
	for i, a := range attrs {
		h.Events = append(h.Events, history.Event{ID: int64(i + 1), Time: at, Attributes: a})
	}
	return h, nil
}

// w4 is W4: replaying a long history, from memory, from an exported file and
// from the database, and what one step of a cached run costs.
func (b *bench) w4(ctx context.Context) (result, error) {
	steps := (b.cfg.events - 2) / 2
	res := w4Result{head: b.head("W4"), Events: b.cfg.events}
	h, err := loopHistory(steps)
	if err != nil {
		return nil, err
	}
	rp, err := engine.NewReplayer(engine.ReplayerOptions{Logger: b.log})
	if err != nil {
		return nil, err
	}
	if err := register(rp); err != nil {
		return nil, err
	}
	replay := func() (time.Duration, error) {
		t0 := time.Now()
		err := rp.Replay(ctx, h)
		return time.Since(t0), err
	}
	cold, err := replay()
	if err != nil {
		return nil, fmt.Errorf("replay from memory: %w", err)
	}
	var warm []time.Duration
	for range 5 {
		d, err := replay()
		if err != nil {
			return nil, fmt.Errorf("replay from memory: %w", err)
		}
		warm = append(warm, d)
	}
	slices.Sort(warm)
	res.MemoryColdMS, res.MemoryMS = benchkit.MS(cold), benchkit.MS(benchkit.Quantile(warm, 0.5))

	res.FileBytes, res.FileMS, err = replayFile(ctx, rp, h)
	if err != nil {
		return nil, err
	}

	clock := &stepClock{}
	r, err := b.startEngine(ctx, clock.register)
	if err != nil {
		return nil, err
	}
	err = b.recordedRun(ctx, r.Engine, clock, steps, &res)
	if err := errors.Join(err, r.stop()); err != nil {
		return nil, err
	}
	return res, nil
}

// replayFile exports h to a temporary file, then times reading it back
// (open, Import) and replaying it.
func replayFile(ctx context.Context, rp *engine.Replayer, h history.History) (int64, float64, error) {
	f, err := os.CreateTemp("", "durable-bench-history-*.json")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriter(f)
	err = history.Export(w, h)
	if err == nil {
		err = w.Flush()
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return 0, 0, fmt.Errorf("export history: %w", err)
	}
	t0 := time.Now()
	f, err = os.Open(f.Name())
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	got, err := history.Import(bufio.NewReader(f))
	if err != nil {
		return 0, 0, err
	}
	if err := rp.Replay(ctx, got); err != nil {
		return 0, 0, fmt.Errorf("replay from file: %w", err)
	}
	d := time.Since(t0)
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	return st.Size(), benchkit.MS(d), nil
}

// recordedRun runs a TimedLoop of steps activities on e, timing each step,
// then replays the run's history from the database.
func (b *bench) recordedRun(ctx context.Context, e *engine.Engine, clock *stepClock, steps int, res *w4Result) error {
	t0 := time.Now()
	run, err := engine.Start(ctx, e, clock.TimedLoop, steps, engine.StartOptions{})
	if err != nil {
		return fmt.Errorf("start the recorded run: %w", err)
	}
	if _, err := run.Result(ctx); err != nil {
		return fmt.Errorf("recorded run: %w", err)
	}
	res.RecordedSeconds = benchkit.Round(time.Since(t0).Seconds(), 3)
	gaps := clock.gaps()
	if len(gaps) < 10 {
		return fmt.Errorf("recorded run: %d steps timed, want at least 10 (raise -events)", len(gaps)+1)
	}
	res.Steps = len(gaps) + 1
	tenth := len(gaps) / 10
	res.StepFirstTenth = benchkit.MS(median(gaps[:tenth]))
	res.StepLastTenth = benchkit.MS(median(gaps[len(gaps)-tenth:]))
	res.Step = benchkit.LatencyOf(gaps)

	t0 = time.Now()
	if err := e.ReplayRun(ctx, run.WorkflowID); err != nil {
		return fmt.Errorf("replay from the database: %w", err)
	}
	res.DatabaseMS = benchkit.MS(time.Since(t0))
	h, err := e.ExportHistory(ctx, run.WorkflowID)
	if err != nil {
		return err
	}
	res.DatabaseEvents = len(h.Events)
	return nil
}

// median returns the median of ds, leaving ds alone.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return benchkit.Quantile(s, 0.5)
}

// stepClock times the steps of a TimedLoop run: its TimedStep activity
// notes when each call begins, so the time between two calls is one step
// (the activity's outcome committed, the next workflow task run and
// committed, the next activity claimed).
type stepClock struct {
	mu sync.Mutex
	at []time.Time
}

func (c *stepClock) register(e *engine.Engine) error {
	return errors.Join(
		engine.RegisterActivity(e, c.TimedStep, activity.Options{}),
		engine.RegisterWorkflow(e, c.TimedLoop, engine.WorkflowOptions{}),
	)
}

// TimedStep is Noop that notes the time.
func (c *stepClock) TimedStep(_ context.Context, x int) (int, error) {
	c.mu.Lock()
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	return x + 1, nil
}

// TimedLoop is Loop with TimedStep.
func (c *stepClock) TimedLoop(ctx workflow.Context, n int) (int, error) {
	x := 0
	for range n {
		var err error
		if x, err = workflow.ExecuteActivity(ctx, c.TimedStep, x).Get(ctx); err != nil {
			return 0, err
		}
	}
	return x, nil
}

// gaps returns the times between consecutive TimedStep calls.
func (c *stepClock) gaps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ds []time.Duration
	for i := 1; i < len(c.at); i++ {
		ds = append(ds, c.at[i].Sub(c.at[i-1]))
	}
	return ds
}
