package engine

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/timer"
	"github.com/durable-go/durable/internal/workers"
)

// Run runs this engine's workers until ctx is done: for each queue it
// polls (Options.Queues, and without those every queue a registration
// names), workflow-task and activity workers with the configured
// concurrency. Work is picked up when a notification says it is ready, with
// a slow poll as a backstop.
//
// When ctx is done, Run stops claiming, lets running tasks finish for up to
// Options.ShutdownTimeout, then cancels the activities still running, gives
// back every claim it holds, and returns nil. Claimed work is finished or
// released, never stranded.
//
// An activity that ignores its cancelled context does not hold Run up: Run
// waits for the cancelled tasks at most shutdownGrace more (a second, or
// ShutdownTimeout if that is shorter) and returns. Go cannot stop a
// goroutine, so such an activity's goroutine runs on after Run returned,
// until the function returns; its claim was given back with the others
// (the task runs again, on this engine's next Run or another worker), and
// what it returns is not recorded: the engine drops a result that comes
// after shutdown cancelled its attempt, and the store refuses any write
// of a superseded attempt (fencing, see docs/reliability.md).
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("engine: Run called while already running")
	}
	defer e.running.Store(false)
	e.hub.Acquire()
	defer e.hub.Release()

	// hard is what running tasks see: it ends ShutdownTimeout after ctx.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()

	var tasks sync.WaitGroup // every task goroutine, polled or handed off
	ps := &pools{wf: map[string]*workers.Pool[store.WorkflowTask]{}, act: map[string]*workers.Pool[store.ActivityTask]{},
		steps: map[string]*workers.Semaphore{}}
	wakeSlots := 0
	queues := e.serve(ctx)
	defer e.unserve()
	for queue, qo := range queues {
		ps.wf[queue] = workers.NewPool(hard, &tasks, qo.WorkflowConcurrency, func(ctx context.Context, t store.WorkflowTask, _ *workers.Slot) *store.WorkflowTask {
			e.processWorkflowTask(ctx, t)
			return nil
		})
		ps.act[queue] = workers.NewPool(hard, &tasks, qo.ActivityConcurrency, e.runActivityTask)
		ps.steps[queue] = workers.NewSemaphore(qo.ActivityConcurrency)
		wakeSlots += 2 * qo.WorkflowConcurrency
	}
	firer := &timerFirer{e: e} // the scanner's store; its rescan is set below
	ps.wake = workers.NewPool(hard, &tasks, wakeSlots, firer.runWake)
	e.pools.Store(ps) // before the scanner, whose fires hand tasks to the pools

	var wg sync.WaitGroup
	scanner := timer.NewScanner(firer, timer.Options{
		NowFunc: e.dueNow, PollInterval: e.opts.PollInterval, Logger: e.log,
		ErrorFunc: func(err error, retryIn time.Duration) {
			if err != nil {
				e.hub.DB.Fail(ctx, "fire timers", err, retryIn)
			} else {
				e.hub.DB.OK(ctx, "fire timers")
			}
		},
		OnFire: func(f store.Fired) {
			e.announce(store.Ready{WorkflowQueues: f.Queues})
			for _, t := range f.Timers {
				e.observeFire(ctx, t)
			}
		},
	})
	firer.rescan = scanner.Wake
	tw := e.hub.Wake(notify.Timers, func() bool { return true })
	defer e.hub.Unwake(notify.Timers, tw)
	wg.Add(3)
	go func() {
		defer wg.Done()
		scanner.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		e.pollGauges(ctx, e.opts.MetricsInterval)
	}()
	wg.Add(2)
	go func() {
		defer wg.Done()
		e.expireUnstarted(ctx) // activitytimeouts.go
	}()
	go func() {
		defer wg.Done()
		e.recordSelf(ctx) // schema.go
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tw.C:
				scanner.Wake()
			}
		}
	}()
	// Steps' writes are committed in groups while the engine runs (see
	// Options.CommitGroupSize); they wait for every task to finish.
	stopGroup := func() {}
	if e.opts.CommitGroupSize > 1 {
		stopGroup = e.store.StartGroupCommit(2, e.opts.CommitGroupSize)
	}
	for queue := range queues {
		wg.Add(2)
		go func() {
			defer wg.Done()
			pollLoop(ctx, e, "workflow", notify.WorkflowTasks(queue), ps.wf[queue], e.claimWorkflowTasks)
		}()
		go func() {
			defer wg.Done()
			pollLoop(ctx, e, "activity", notify.ActivityTasks(queue), ps.act[queue], e.claimActivityTasks)
		}()
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "engine running", slog.String("worker", e.opts.WorkerID), slog.Any("queues", slices.Sorted(maps.Keys(queues))))
	<-ctx.Done()
	e.handoffMu.Lock() // wait for a Start that is handing off its first task
	e.pools.Store(nil) // no more hand-offs
	e.handoffMu.Unlock()

	polled := make(chan struct{}) // the pollers, the scanner and the gauges stopped
	go func() { wg.Wait(); close(polled) }()
	done := make(chan struct{}) // and every task returned
	go func() { <-polled; tasks.Wait(); close(done) }()
	t := time.NewTimer(e.opts.ShutdownTimeout)
	select {
	case <-done:
	case <-t.C:
		e.log.LogAttrs(hard, slog.LevelWarn, "shutdown timeout: cancelling running activities")
		cancelHard()
		grace := time.NewTimer(shutdownGrace(e.opts.ShutdownTimeout))
		select {
		case <-done:
		case <-grace.C:
			// Go cannot stop a goroutine: a task that ignores its
			// cancelled context runs on, detached. Its claim is given back
			// below, and what it returns is not recorded (see attempt).
			<-polled // they run no user code, and claim nothing after this
			e.log.LogAttrs(hard, slog.LevelWarn, "shutdown: tasks that ignore cancellation are left running; their claims are given back and what they return will not be recorded")
		}
		grace.Stop()
	}
	t.Stop()
	stopGroup() // a task left running writes without it

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rel := store.ReleaseParams{WorkerID: e.opts.WorkerID, Now: e.now()}
	if err := e.store.ReleaseWorkflowTasks(rctx, rel); err != nil {
		e.log.LogAttrs(rctx, slog.LevelError, "release workflow tasks on shutdown; they return when their leases end", slog.String("error", err.Error()))
	}
	if err := e.store.ReleaseActivityTasks(rctx, rel); err != nil {
		e.log.LogAttrs(rctx, slog.LevelError, "release activity tasks on shutdown; they return when their leases end", slog.String("error", err.Error()))
	}
	e.cache.Clear()
	e.wakes.clear() // their runs left with the cache; the scanner of the next Run fires them
	e.log.LogAttrs(rctx, slog.LevelInfo, "engine stopped", slog.String("worker", e.opts.WorkerID))
	return nil
}

// shutdownGrace is how long Run waits, once it has cancelled the tasks still
// running at the end of ShutdownTimeout, for them to return.
func shutdownGrace(timeout time.Duration) time.Duration { return min(timeout, time.Second) }

// pools are the running engine's worker pools, by queue.
type pools struct {
	wf  map[string]*workers.Pool[store.WorkflowTask]
	act map[string]*workers.Pool[store.ActivityTask]
	// wake runs the wakes of cached runs whose timers came due (see
	// timerfire.go), beside the queues' workflow slots, as a fused step
	// runs in its activity's slot: a burst of wakes must not wait behind,
	// or crowd out, the tasks the queues' slots run.
	wake *workers.Pool[wakeJob]
	// steps, by activity queue, are the slots in which the outcomes of a
	// queue's activities and the steps they lead to run (see
	// Engine.resolve), so that the activities' slots are free meanwhile.
	// Like wakes, they neither wait behind nor crowd out the workflow
	// tasks the queues' slots run.
	steps map[string]*workers.Semaphore
}

// workflowPool returns the running pool of the queue, or nil.
func (e *Engine) workflowPool(queue string) *workers.Pool[store.WorkflowTask] {
	if ps := e.pools.Load(); ps != nil {
		return ps.wf[queue]
	}
	return nil
}

// stepSlots returns the step slots of the running activity queue, or nil.
func (e *Engine) stepSlots(queue string) *workers.Semaphore {
	if ps := e.pools.Load(); ps != nil {
		return ps.steps[queue]
	}
	return nil
}

// activityPool returns the running pool of the queue, or nil.
func (e *Engine) activityPool(queue string) *workers.Pool[store.ActivityTask] {
	if ps := e.pools.Load(); ps != nil {
		return ps.act[queue]
	}
	return nil
}

// pollLoop claims tasks of one kind on one queue (those key announces)
// whenever its pool has free slots and there is work. It returns when ctx
// is done.
func pollLoop[T any](ctx context.Context, e *Engine, kind string, key store.Note, p *workers.Pool[T],
	claim func(ctx context.Context, queue string, n int) ([]T, error)) {
	queue := key.Queue
	w := e.hub.Wake(key, p.HasFree)
	defer e.hub.Unwake(key, w)
	errBackoff := 100 * time.Millisecond
	for {
		if !p.Acquire(ctx) {
			return
		}
		if ctx.Err() != nil { // both were ready and select chose the slot
			p.Release()
			return
		}
		free := 1 + p.TryAcquireUpTo(p.Cap()-1)
		// A claim that commits must not be lost to a cancelled context, so
		// claims are not cut short by ctx; they are short.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		claimedAt := e.dueNow() // the clock claims decide by
		tasks, err := claim(cctx, queue, free)
		cancel()
		p.ReleaseN(free - len(tasks))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.hub.DB.Fail(ctx, "claim "+kind+" tasks on queue "+queue, err, errBackoff)
			if !sleepCtx(ctx, errBackoff) {
				return
			}
			errBackoff = min(2*errBackoff, 5*time.Second)
			continue
		}
		e.hub.DB.OK(ctx, "claim "+kind+" tasks on queue "+queue)
		errBackoff = 100 * time.Millisecond
		for _, t := range tasks {
			p.Start(t)
		}
		if len(tasks) == free {
			continue // there may be more
		}
		wait := e.opts.PollInterval
		if due, ok, err := e.store.NextDue(ctx, kind, queue); err == nil && ok {
			var again bool
			if again, wait = pollWait(due, claimedAt, e.dueNow(), wait); again {
				continue
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-w.C:
		case <-t.C:
		}
		t.Stop()
	}
}

// pollWait says what a poller whose claim at claimedAt came back short
// does, given the queue's next due task at due and the clock at now: claim
// again at once (a task that came due since the claim, such as a retry due
// a few milliseconds after it was recorded), or sleep until due, at most
// poll. A task due before the claim that the claim left is of a type this
// worker does not have: it waits for poll.
//
// now is read once. Read twice, once to ask whether the task had come due
// and again for how long until it does, a task coming due between the two
// reads got neither answer, and its poller slept the whole poll interval
// (the five-second stalls of W2 from another process, 2026-12-03).
func pollWait(due, claimedAt, now time.Time, poll time.Duration) (again bool, wait time.Duration) {
	if due.After(claimedAt) && !due.After(now) {
		return true, 0
	}
	if left := due.Sub(now); left > 0 {
		return false, min(poll, left)
	}
	return false, poll
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
