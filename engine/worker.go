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
	if err := e.needDB(); err != nil {
		return err
	}
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
	ps := &pools{wf: map[string]*workerPool[store.WorkflowTask]{}, act: map[string]*workerPool[store.ActivityTask]{},
		steps: map[string]*semaphore{}}
	wakeSlots := 0
	queues := e.serve(ctx)
	defer e.unserve()
	for queue, qo := range queues {
		ps.wf[queue] = newWorkerPool(hard, &tasks, qo.WorkflowConcurrency, func(ctx context.Context, t store.WorkflowTask, _ *slot) *store.WorkflowTask {
			e.processWorkflowTask(ctx, t)
			return nil
		})
		ps.act[queue] = newWorkerPool(hard, &tasks, qo.ActivityConcurrency, e.runActivityTask)
		ps.steps[queue] = newSemaphore(qo.ActivityConcurrency)
		wakeSlots += 2 * qo.WorkflowConcurrency
	}
	firer := &timerFirer{e: e} // the scanner's store; its rescan is set below
	ps.wake = newWorkerPool(hard, &tasks, wakeSlots, firer.runWake)
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.expireUnstarted(ctx) // activitytimeouts.go
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
	wf  map[string]*workerPool[store.WorkflowTask]
	act map[string]*workerPool[store.ActivityTask]
	// wake runs the wakes of cached runs whose timers came due (see
	// timerfire.go), beside the queues' workflow slots, as a fused step
	// runs in its activity's slot: a burst of wakes must not wait behind,
	// or crowd out, the tasks the queues' slots run.
	wake *workerPool[wakeJob]
	// steps, by activity queue, are the slots in which the outcomes of a
	// queue's activities and the steps they lead to run (see
	// Engine.resolve), so that the activities' slots are free meanwhile.
	// Like wakes, they neither wait behind nor crowd out the workflow
	// tasks the queues' slots run.
	steps map[string]*semaphore
}

// workflowPool returns the running pool of the queue, or nil.
func (e *Engine) workflowPool(queue string) *workerPool[store.WorkflowTask] {
	if ps := e.pools.Load(); ps != nil {
		return ps.wf[queue]
	}
	return nil
}

// stepSlots returns the step slots of the running activity queue, or nil.
func (e *Engine) stepSlots(queue string) *semaphore {
	if ps := e.pools.Load(); ps != nil {
		return ps.steps[queue]
	}
	return nil
}

// activityPool returns the running pool of the queue, or nil.
func (e *Engine) activityPool(queue string) *workerPool[store.ActivityTask] {
	if ps := e.pools.Load(); ps != nil {
		return ps.act[queue]
	}
	return nil
}

// workerPool runs tasks of one kind from one queue, at most cap of its
// semaphore at a time. Tasks come from its poller, or are handed off by a
// transaction that claimed them for this worker (a completion claiming the
// run's next workflow task, a workflow task claiming the activities it
// scheduled).
type workerPool[T any] struct {
	*semaphore
	hard  context.Context
	tasks *sync.WaitGroup
	// work runs a task in slot s, which holds a slot of this pool; it may
	// trade it for another pool's (see Engine.resolve). It may return
	// another task for the slot to run next: s then holds a slot of this
	// pool again.
	work func(ctx context.Context, t T, s *slot) (next *T)
}

func newWorkerPool[T any](hard context.Context, tasks *sync.WaitGroup, slots int, work func(context.Context, T, *slot) *T) *workerPool[T] {
	return &workerPool[T]{semaphore: newSemaphore(slots), hard: hard, tasks: tasks, work: work}
}

// start runs t in a reserved slot. It must be called by a task of the same
// engine or by the pool's poller, so that Run's wait has not finished.
func (p *workerPool[T]) start(t T) {
	p.run(func(ctx context.Context, s *slot) *T { return p.work(ctx, t, s) })
}

// run runs fn in a reserved slot, then the tasks it returns for the slot,
// as start does.
func (p *workerPool[T]) run(fn func(ctx context.Context, s *slot) (next *T)) {
	p.tasks.Add(1)
	go func() {
		defer p.tasks.Done()
		s := &slot{held: p.semaphore}
		defer s.release()
		for next := fn(p.hard, s); next != nil; {
			next = p.work(p.hard, *next, s)
		}
	}()
}

// semaphore counts a pool's busy slots. A slot given back goes to a task
// waiting for one in acquireWithin, if there is one, before the poller: a
// task already claimed runs before the next claim.
type semaphore struct {
	slots  chan struct{} // one element per busy slot
	direct chan struct{} // unbuffered: a slot passed from release to a waiter
}

func newSemaphore(n int) *semaphore {
	return &semaphore{slots: make(chan struct{}, n), direct: make(chan struct{})}
}

// tryAcquire reserves a slot if one is free.
func (p *semaphore) tryAcquire() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// acquireWithin reserves a slot, waiting up to d for one to free up.
func (p *semaphore) acquireWithin(ctx context.Context, d time.Duration) bool {
	if p.tryAcquire() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return true
	case <-p.direct:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (p *semaphore) hasFree() bool { return len(p.slots) < cap(p.slots) }

// tryAcquireUpTo reserves free slots, at most n, and returns how many.
func (p *semaphore) tryAcquireUpTo(n int) int {
	got := 0
	for got < n && p.tryAcquire() {
		got++
	}
	return got
}

// release gives back a slot: to a task waiting in acquireWithin, or to the
// pool.
func (p *semaphore) release() {
	select {
	case p.direct <- struct{}{}:
	default:
		<-p.slots
	}
}

// releaseN gives back n slots.
func (p *semaphore) releaseN(n int) {
	for range n {
		p.release()
	}
}

// slot is what a running task holds: a slot of its pool, one of another
// pool it traded it for, or none (held is nil). Its goroutine releases it
// when it ends.
type slot struct{ held *semaphore }

// trade holds a free slot of p instead of the one s holds, and reports
// whether there was one.
func (s *slot) trade(p *semaphore) bool {
	if !p.tryAcquire() {
		return false
	}
	s.release()
	s.held = p
	return true
}

// release gives back the slot s holds, if any.
func (s *slot) release() {
	if s.held != nil {
		s.held.release()
		s.held = nil
	}
}

// pollLoop claims tasks of one kind on one queue (those key announces)
// whenever its pool has free slots and there is work. It returns when ctx
// is done.
func pollLoop[T any](ctx context.Context, e *Engine, kind string, key store.Note, p *workerPool[T],
	claim func(ctx context.Context, queue string, n int) ([]T, error)) {
	queue := key.Queue
	w := e.hub.Wake(key, p.hasFree)
	defer e.hub.Unwake(key, w)
	errBackoff := 100 * time.Millisecond
	for {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil { // both were ready and select chose the slot
			p.release()
			return
		}
		free := 1 + p.tryAcquireUpTo(cap(p.slots)-1)
		// A claim that commits must not be lost to a cancelled context, so
		// claims are not cut short by ctx; they are short.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		claimedAt := e.dueNow() // the clock claims decide by
		tasks, err := claim(cctx, queue, free)
		cancel()
		p.releaseN(free - len(tasks))
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
			p.start(t)
		}
		if len(tasks) == free {
			continue // there may be more
		}
		wait := e.opts.PollInterval
		// Sleep until the next task comes due. One due before the claim
		// that the claim left is of a type this worker does not have; one
		// that came due since (a retry due a few milliseconds after it was
		// recorded) is claimed at once.
		if due, ok, err := e.store.NextDue(ctx, kind, queue); err == nil && ok {
			if due.After(claimedAt) && !due.After(e.dueNow()) {
				continue
			}
			if left := due.Sub(e.dueNow()); left > 0 {
				wait = min(wait, left)
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
