package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/benchkit"
	"github.com/durable-go/durable/workflow"
)

// Noop is the no-op activity: x -> x+1.
func Noop(_ context.Context, x int) (int, error) { return x + 1, nil }

// ThreeNoops is W1's and W6's workflow: three Noops in a row.
func ThreeNoops(ctx workflow.Context, x int) (int, error) {
	for range 3 {
		var err error
		if x, err = workflow.ExecuteActivity(ctx, Noop, x).Get(ctx); err != nil {
			return 0, err
		}
	}
	return x, nil
}

// Step is the input and result of a Wait activity, and ThreeWaits's input.
type Step struct {
	X int `json:"x"`
	// Wait is how long the activity takes.
	Wait time.Duration `json:"wait"`
}

// Wait is the activity W1 and W6 run instead of Noop with -activity-time:
// x -> x+1 after in.Wait (a timer, not the CPU).
func Wait(ctx context.Context, in Step) (Step, error) {
	t := time.NewTimer(in.Wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return Step{}, ctx.Err()
	}
	in.X++
	return in, nil
}

// ThreeWaits is W1's and W6's workflow with -activity-time: three Waits in
// a row.
func ThreeWaits(ctx workflow.Context, in Step) (int, error) {
	for range 3 {
		var err error
		if in, err = workflow.ExecuteActivity(ctx, Wait, in).Get(ctx); err != nil {
			return 0, err
		}
	}
	return in.X, nil
}

// OneNoop is W2's workflow.
func OneNoop(ctx workflow.Context, x int) (int, error) {
	return workflow.ExecuteActivity(ctx, Noop, x).Get(ctx)
}

// Sleeper is W3's workflow: it sleeps for d.
func Sleeper(ctx workflow.Context, d time.Duration) (int, error) {
	return 0, workflow.Sleep(ctx, d)
}

// SleepWeek is W5's workflow: it sleeps for a week.
func SleepWeek(ctx workflow.Context, _ int) (int, error) {
	return 0, workflow.Sleep(ctx, 7*24*time.Hour)
}

// register registers the workloads' workflows and activities on e: the
// same set in the driver and in worker processes.
func register(e engine.Registrar) error {
	return errors.Join(
		engine.RegisterActivity(e, Noop, activity.Options{}),
		engine.RegisterActivity(e, Wait, activity.Options{}),
		engine.RegisterWorkflow(e, ThreeWaits, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, ThreeNoops, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, OneNoop, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, Sleeper, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, SleepWeek, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, Loop, engine.WorkflowOptions{}),
	)
}

// openLoop starts n runs of wf from starters goroutines as fast as they go
// (in(i) is the i-th run's input); each start is followed by a goroutine
// that waits for the run's result with Run.Result. The first error stops
// it.
func openLoop[In, Out any](ctx context.Context, e *engine.Engine, wf func(workflow.Context, In) (Out, error), in func(int) In, n, starters int) (benchkit.Loop, error) {
	return benchkit.OpenLoop(ctx, n, starters, func(ctx context.Context, i int) (func(context.Context) error, error) {
		r, err := engine.Start(ctx, e, wf, in(i), engine.StartOptions{})
		if err != nil {
			return nil, fmt.Errorf("start run %d: %w", i, err)
		}
		return func(ctx context.Context) error {
			if _, err := r.Result(ctx); err != nil {
				return fmt.Errorf("result of run %s: %w", r.RunID, err)
			}
			return nil
		}, nil
	})
}

// threeSteps is W1's and W6's open loop on e: ThreeNoops, or ThreeWaits
// with -activity-time.
func (b *bench) threeSteps(ctx context.Context, e *engine.Engine) (benchkit.Loop, error) {
	if d := b.cfg.activityTime; d > 0 {
		return openLoop(ctx, e, ThreeWaits, func(i int) Step { return Step{X: i, Wait: d} }, b.cfg.workflows, b.cfg.starters)
	}
	return openLoop(ctx, e, ThreeNoops, identity, b.cfg.workflows, b.cfg.starters)
}

func identity(i int) int { return i }

// sequential starts a OneNoop run and waits for its result, n times in a
// row after one warm-up round trip (which pays for connections and
// prepared statements), and returns the round trips' times.
func sequential(ctx context.Context, e *engine.Engine, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for i := range n + 1 {
		t0 := time.Now()
		r, err := engine.Start(ctx, e, OneNoop, i, engine.StartOptions{})
		if err != nil {
			return nil, fmt.Errorf("start run %d: %w", i, err)
		}
		if _, err := r.Result(ctx); err != nil {
			return nil, fmt.Errorf("result of run %s: %w", r.RunID, err)
		}
		if i > 0 {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

// w1 is W1: the open-loop throughput of three-activity workflows, with the
// starters in the engine's process.
func (b *bench) w1(ctx context.Context) (result, error) {
	res := w1Result{head: b.head("W1"), Starters: b.cfg.starters, ActivityMS: benchkit.MS(b.cfg.activityTime)}
	if b.sqlite() {
		res.skip("xact_commits, commits_per_step", whyNoCommitCount)
		lt, err := b.inProcessLoad(ctx)
		if err != nil {
			return nil, err
		}
		res.loadFigures = newLoadFigures(b.cfg.workflows, lt)
		return res, nil
	}
	c0, err := b.commits(ctx)
	if err != nil {
		return nil, err
	}
	lt, err := b.inProcessLoad(ctx)
	if err != nil {
		return nil, err
	}
	c1, err := b.commits(ctx)
	if err != nil {
		return nil, err
	}
	res.loadFigures = newLoadFigures(b.cfg.workflows, lt).withCommits(c1 - c0)
	return res, nil
}

// inProcessLoad is W1's open loop on an engine of its own, stopped (its
// pool closed) when it returns.
func (b *bench) inProcessLoad(ctx context.Context) (benchkit.Loop, error) {
	r, err := b.startEngine(ctx)
	if err != nil {
		return benchkit.Loop{}, err
	}
	lt, err := b.threeSteps(ctx, r.Engine)
	return lt, errors.Join(err, r.stop())
}

// w2 is W2: the latency of one start and result at a time, with the
// starter in the engine's process, then (on PostgreSQL) in a process of
// its own.
func (b *bench) w2(ctx context.Context) (result, error) {
	r, err := b.startEngine(ctx)
	if err != nil {
		return nil, err
	}
	in, err := sequential(ctx, r.Engine, b.cfg.sequential)
	if err := errors.Join(err, r.stop()); err != nil {
		return nil, fmt.Errorf("in-process: %w", err)
	}
	res := w2Result{head: b.head("W2"), Runs: b.cfg.sequential, InProcess: benchkit.LatencyOf(in)}
	if b.sqlite() {
		res.skip("cross_process, cross_process_listening", whyCrossProcess)
		return res, nil
	}

	w, err := b.startWorkers(ctx, 1, b.cfg.conns)
	if err != nil {
		return nil, err
	}
	e, closeClient, err := b.client(ctx)
	var cross, listening []time.Duration
	if err == nil {
		cross, listening, err = b.crossProcess(ctx, e)
		closeClient()
	}
	if err := errors.Join(err, w.stop()); err != nil {
		return nil, fmt.Errorf("cross-process: %w", err)
	}
	c, l := benchkit.LatencyOf(cross), benchkit.LatencyOf(listening)
	res.CrossProcess, res.CrossProcessListening = &c, &l
	return res, nil
}

// crossProcess is W2's round trips from a client-only engine e, first
// alone, then while another Result waits in the same process. An engine
// that does not run listens for notifications only while a Result waits,
// so alone each Result starts (and stops) the listener; a client serving
// many callers would have one listening already.
func (b *bench) crossProcess(ctx context.Context, e *engine.Engine) (alone, listening []time.Duration, err error) {
	if alone, err = sequential(ctx, e, b.cfg.sequential); err != nil {
		return nil, nil, err
	}
	r, err := engine.Start(ctx, e, SleepWeek, 0, engine.StartOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("start the run waited on: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	waiting := make(chan error, 1)
	go func() {
		_, err := r.Result(wctx)
		waiting <- err
	}()
	listening, err = sequential(ctx, e, b.cfg.sequential)
	cancel()
	if werr := <-waiting; !errors.Is(werr, context.Canceled) {
		err = errors.Join(err, fmt.Errorf("wait on a sleeping run: %w", werr))
	}
	return alone, listening, err
}

// clientConns is the pool size of a driver engine that only starts and waits.
const clientConns = 8

// client returns a client-only engine, which starts workflows and waits for
// results but never runs (worker processes do the work), and a function
// that closes its pool.
func (b *bench) client(ctx context.Context) (*engine.Engine, func(), error) {
	pool, err := b.pool(ctx, clientConns)
	if err != nil {
		return nil, nil, err
	}
	e, err := newEngine(pool, b.log, b.cfg.cache)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return e, pool.Close, nil
}

// w3 is W3: how late runs that sleep wake up, as their starter sees it.
func (b *bench) w3(ctx context.Context) (result, error) {
	r, err := b.startEngine(ctx)
	if err != nil {
		return nil, err
	}
	sleep := b.cfg.sleep
	lt, err := openLoop(ctx, r.Engine, Sleeper, func(int) time.Duration { return sleep }, b.cfg.sleepers, b.cfg.starters)
	if err := errors.Join(err, r.stop()); err != nil {
		return nil, err
	}
	for i := range lt.Lat {
		lt.Lat[i] -= sleep
	}
	return w3Result{
		head: b.head("W3"), Runs: b.cfg.sleepers, SleepMS: benchkit.MS(sleep),
		StartSeconds: benchkit.Round(lt.Started.Seconds(), 3), Lateness: benchkit.LatencyOf(lt.Lat),
	}, nil
}

// w6 is W6: W1 against 1, 2, 4... worker processes, started from the
// driver's process, which does not run the engine.
func (b *bench) w6(ctx context.Context) (result, error) {
	if b.sqlite() {
		res := skippedResult{b.head("W6")}
		res.skip("", whyProcesses)
		return res, nil
	}
	res := w6Result{head: b.head("W6"), Starters: b.cfg.starters, ActivityMS: benchkit.MS(b.cfg.activityTime)}
	for _, procs := range b.cfg.procs {
		c0, err := b.commits(ctx)
		if err != nil {
			return nil, err
		}
		// Keep the workers' connections within a default max_connections
		// of 100, shared with whatever else runs on the server.
		conns := max(4, min(b.cfg.conns, workerConnBudget/procs))
		w, err := b.startWorkers(ctx, procs, conns)
		if err != nil {
			return nil, err
		}
		e, closeClient, err := b.client(ctx)
		var lt benchkit.Loop
		if err == nil {
			lt, err = b.threeSteps(ctx, e)
			closeClient()
		}
		if err := errors.Join(err, w.stop()); err != nil {
			return nil, fmt.Errorf("%d processes: %w", procs, err)
		}
		c1, err := b.commits(ctx)
		if err != nil {
			return nil, err
		}
		res.Points = append(res.Points, w6Point{Processes: procs, loadFigures: newLoadFigures(b.cfg.workflows, lt).withCommits(c1 - c0)})
		fmt.Fprintf(b.progress, "W6: %d process(es): %.0f workflows/s\n", procs, res.Points[len(res.Points)-1].Throughput)
	}
	base := res.Points[0].Throughput
	for i := range res.Points {
		res.Points[i].Speedup = benchkit.Round(res.Points[i].Throughput/base, 2)
	}
	return res, nil
}

// workerConnBudget is the most connections W6's workers hold together.
const workerConnBudget = 48

// w5 is W5: what runs asleep on a durable timer cost the worker (goroutines,
// live heap) and the database.
func (b *bench) w5(ctx context.Context) (result, error) {
	r, err := b.startEngine(ctx)
	if err != nil {
		return nil, err
	}
	st, err := b.dbStats(r)
	if err != nil {
		return nil, errors.Join(err, r.stop())
	}
	res, err := b.sleepingRuns(ctx, r, st)
	return res, errors.Join(err, st.close(), r.stop())
}

// dbStats reads what W5 watches in the bench database.
type dbStats interface {
	// timersAndTasks counts the timers and the workflow tasks.
	timersAndTasks(ctx context.Context) (timers, tasks int, err error)
	// size is the database's size in bytes.
	size(ctx context.Context) (int64, error)
	close() error
}

// dbStats returns the reader of W5's figures for the engine r: its own
// pool on PostgreSQL, a connection of its own on SQLite.
func (b *bench) dbStats(r *running) (dbStats, error) {
	if b.sqlite() {
		return b.openSQLiteStats()
	}
	return postgresStats{b: b, pool: r.pool}, nil
}

// postgresStats reads W5's figures on PostgreSQL: the counts through the
// engine's pool, the size through the admin connection.
type postgresStats struct {
	b    *bench
	pool *pgxpool.Pool
}

func (s postgresStats) timersAndTasks(ctx context.Context) (timers, tasks int, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_timers), (SELECT count(*) FROM durable_workflow_tasks)`).Scan(&timers, &tasks); err != nil {
		return 0, 0, fmt.Errorf("count timers and tasks: %w", err)
	}
	return timers, tasks, nil
}

func (s postgresStats) size(ctx context.Context) (int64, error) { return s.b.dbSize(ctx) }
func (postgresStats) close() error                              { return nil }

// quiesce waits, at most 10 s, until the goroutine count is back to base
// or has held still for 200 ms: the last steps' goroutines (a commit's
// follow-up, a slot finishing) end after the runs are asleep, and are not
// what a sleeping run holds.
func quiesce(base int) {
	last, still := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(10 * time.Second); last > base && still < 10 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // sampling a count, not waiting for an event
		if g := runtime.NumGoroutine(); g == last {
			still++
		} else {
			last, still = g, 0
		}
	}
}

func (b *bench) sleepingRuns(ctx context.Context, r *running, st dbStats) (result, error) {
	timers0, _, err := st.timersAndTasks(ctx)
	if err != nil {
		return nil, err
	}
	// Warm up connections and code paths, then take the baseline.
	const warm = 50
	if err := b.putToSleep(ctx, r, st, warm, timers0+warm); err != nil {
		return nil, err
	}
	db0, err := st.size(ctx)
	if err != nil {
		return nil, err
	}
	g0, h0 := measureMemory()
	n := b.cfg.idle
	t0 := time.Now()
	if err := b.putToSleep(ctx, r, st, n, timers0+warm+n); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	quiesce(g0)
	g1, h1 := measureMemory()
	db1, err := st.size(ctx)
	if err != nil {
		return nil, err
	}
	return w5Result{
		head: b.head("W5"), Runs: n, GoroutinesAdded: g1 - g0,
		HeapBytesPerRun:  benchkit.Round((float64(h1)-float64(h0))/float64(n), 1),
		DBBytesPerRun:    benchkit.Round(float64(db1-db0)/float64(n), 1),
		SleepingRunsPerS: benchkit.Round(float64(n)/elapsed.Seconds(), 1),
	}, nil
}

// putToSleep starts n runs of SleepWeek from the starters and waits until
// the database holds wantTimers timers and no workflow task: every run is
// asleep.
func (b *bench) putToSleep(ctx context.Context, r *running, st dbStats, n, wantTimers int) error {
	// The open loop's starters, with nothing to wait for.
	_, err := benchkit.OpenLoop(ctx, n, b.cfg.starters, func(ctx context.Context, i int) (func(context.Context) error, error) {
		if _, err := engine.Start(ctx, r.Engine, SleepWeek, i, engine.StartOptions{}); err != nil {
			return nil, fmt.Errorf("start run %d: %w", i, err)
		}
		return func(context.Context) error { return nil }, nil
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		timers, tasks, err := st.timersAndTasks(ctx)
		if err != nil {
			return err
		}
		if timers == wantTimers && tasks == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 10 minutes, %d timers (want %d) and %d workflow tasks (want 0)", timers, wantTimers, tasks)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
