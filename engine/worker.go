package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/timer"
)

// Run runs this engine's workers until ctx is done: for each queue in
// Options.Queues, workflow-task and activity workers with the configured
// concurrency. Work is picked up when a notification says it is ready, with
// a slow poll as a backstop.
//
// When ctx is done, Run stops claiming, lets running tasks finish for up to
// Options.ShutdownTimeout, then cancels the activities still running, gives
// back every claim it holds, and returns nil. Claimed work is finished or
// released, never stranded.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.needDB(); err != nil {
		return err
	}
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("engine: Run called while already running")
	}
	defer e.running.Store(false)
	e.hub.acquire()
	defer e.hub.release()

	// hard is what running tasks see: it ends ShutdownTimeout after ctx.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()

	var tasks sync.WaitGroup // every task goroutine, polled or handed off
	ps := &pools{wf: map[string]*workerPool[store.WorkflowTask]{}, act: map[string]*workerPool[store.ActivityTask]{}}
	wakeSlots := 0
	for queue, qo := range e.opts.Queues {
		ps.wf[queue] = newWorkerPool(hard, &tasks, qo.WorkflowConcurrency, func(ctx context.Context, t store.WorkflowTask) *store.WorkflowTask {
			e.processWorkflowTask(ctx, t)
			return nil
		})
		ps.act[queue] = newWorkerPool(hard, &tasks, qo.ActivityConcurrency, e.runActivityTask)
		wakeSlots += 2 * qo.WorkflowConcurrency
	}
	firer := &timerFirer{e: e} // the scanner's store; its rescan is set below
	ps.wake = newWorkerPool(hard, &tasks, wakeSlots, firer.runWake)
	e.pools.Store(ps) // before the scanner, whose fires hand tasks to the pools

	var wg sync.WaitGroup
	scanner := timer.NewScanner(firer, timer.Options{
		NowFunc: e.opts.NowFunc, PollInterval: e.opts.PollInterval, Logger: e.log,
		ErrorFunc: func(err error, retryIn time.Duration) {
			if err != nil {
				e.hub.db.fail(ctx, "fire timers", err, retryIn)
			} else {
				e.hub.db.ok(ctx, "fire timers")
			}
		},
		OnFire: func(f timer.Fired) {
			e.announce(store.Ready{WorkflowQueues: f.Queues})
			for _, t := range f.Timers {
				e.observeFire(ctx, t)
			}
		},
	})
	firer.rescan = scanner.Wake
	tw := e.hub.wake("t:", func() bool { return true })
	defer e.hub.unwake("t:", tw)
	wg.Add(3)
	go func() {
		defer wg.Done()
		scanner.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		e.pollGauges(ctx, e.opts.MetricsInterval)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tw.c:
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
	for queue := range e.opts.Queues {
		wg.Add(2)
		go func() {
			defer wg.Done()
			pollLoop(ctx, e, "workflow", queue, ps.wf[queue], e.claimWorkflowTasks)
		}()
		go func() {
			defer wg.Done()
			pollLoop(ctx, e, "activity", queue, ps.act[queue], e.claimActivityTasks)
		}()
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "engine running", slog.String("worker", e.opts.WorkerID), slog.Int("queues", len(e.opts.Queues)))
	<-ctx.Done()
	e.handoffMu.Lock() // wait for a Start that is handing off its first task
	e.pools.Store(nil) // no more hand-offs
	e.handoffMu.Unlock()

	done := make(chan struct{})
	go func() { wg.Wait(); tasks.Wait(); stopGroup(); close(done) }()
	t := time.NewTimer(e.opts.ShutdownTimeout)
	select {
	case <-done:
	case <-t.C:
		e.log.LogAttrs(hard, slog.LevelWarn, "shutdown timeout: cancelling running activities")
		cancelHard()
		<-done
	}
	t.Stop()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rel := store.ReleaseParams{WorkerID: e.opts.WorkerID, Now: e.now()}
	if err := e.store.ReleaseWorkflowTasks(rctx, rel); err != nil {
		e.log.LogAttrs(rctx, slog.LevelError, "release workflow tasks on shutdown; they return when their leases end", slog.String("error", err.Error()))
	}
	if err := e.store.ReleaseActivityTasks(rctx, rel); err != nil {
		e.log.LogAttrs(rctx, slog.LevelError, "release activity tasks on shutdown; they return when their leases end", slog.String("error", err.Error()))
	}
	e.cache.clear()
	e.wakes.clear() // their runs left with the cache; the scanner of the next Run fires them
	e.log.LogAttrs(rctx, slog.LevelInfo, "engine stopped", slog.String("worker", e.opts.WorkerID))
	return nil
}

// pools are the running engine's worker pools, by queue.
type pools struct {
	wf  map[string]*workerPool[store.WorkflowTask]
	act map[string]*workerPool[store.ActivityTask]
	// wake runs the wakes of cached runs whose timers came due (see
	// timerfire.go), beside the queues' workflow slots, as a fused step
	// runs in its activity's slot: a burst of wakes must not wait behind,
	// or crowd out, the tasks the queues' slots run.
	wake *workerPool[wakeJob]
}

// workflowPool returns the running pool of the queue, or nil.
func (e *Engine) workflowPool(queue string) *workerPool[store.WorkflowTask] {
	if ps := e.pools.Load(); ps != nil {
		return ps.wf[queue]
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

// workerPool runs tasks of one kind from one queue, at most cap(sem) at a
// time. Tasks come from its poller, or are handed off by a transaction that
// claimed them for this worker (a completion claiming the run's next
// workflow task, a workflow task claiming the activities it scheduled).
type workerPool[T any] struct {
	sem   chan struct{}
	hard  context.Context
	tasks *sync.WaitGroup
	// work runs a task; it may return another that the slot runs next.
	work func(ctx context.Context, t T) (next *T)
}

func newWorkerPool[T any](hard context.Context, tasks *sync.WaitGroup, slots int, work func(context.Context, T) *T) *workerPool[T] {
	return &workerPool[T]{sem: make(chan struct{}, slots), hard: hard, tasks: tasks, work: work}
}

// tryAcquire reserves a slot if one is free.
func (p *workerPool[T]) tryAcquire() bool {
	select {
	case p.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// acquireWithin reserves a slot, waiting up to d for one to free up.
func (p *workerPool[T]) acquireWithin(ctx context.Context, d time.Duration) bool {
	if p.tryAcquire() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case p.sem <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (p *workerPool[T]) hasFree() bool { return len(p.sem) < cap(p.sem) }

// tryAcquireUpTo reserves free slots, at most n, and returns how many.
func (p *workerPool[T]) tryAcquireUpTo(n int) int {
	got := 0
	for got < n && p.tryAcquire() {
		got++
	}
	return got
}

// release gives back a reserved slot that no task used.
func (p *workerPool[T]) release() { <-p.sem }

// releaseN gives back n reserved slots that no task used.
func (p *workerPool[T]) releaseN(n int) {
	for range n {
		p.release()
	}
}

// start runs t in a reserved slot. It must be called by a task of the same
// engine or by the pool's poller, so that Run's wait has not finished.
func (p *workerPool[T]) start(t T) {
	p.tasks.Add(1)
	go func() {
		defer p.tasks.Done()
		defer p.release()
		for next := &t; next != nil; {
			next = p.work(p.hard, *next)
		}
	}()
}

// pollLoop claims tasks of one kind on one queue whenever its pool has free
// slots and there is work. It returns when ctx is done.
func pollLoop[T any](ctx context.Context, e *Engine, kind, queue string, p *workerPool[T],
	claim func(ctx context.Context, queue string, n int) ([]T, error)) {
	key := kind[:1] + ":" + queue
	w := e.hub.wake(key, p.hasFree)
	defer e.hub.unwake(key, w)
	errBackoff := 100 * time.Millisecond
	for {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil { // both were ready and select chose the slot
			p.release()
			return
		}
		free := 1 + p.tryAcquireUpTo(cap(p.sem)-1)
		// A claim that commits must not be lost to a cancelled context, so
		// claims are not cut short by ctx; they are short.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		tasks, err := claim(cctx, queue, free)
		cancel()
		p.releaseN(free - len(tasks))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.hub.db.fail(ctx, "claim "+kind+" tasks on queue "+queue, err, errBackoff)
			if !sleepCtx(ctx, errBackoff) {
				return
			}
			errBackoff = min(2*errBackoff, 5*time.Second)
			continue
		}
		e.hub.db.ok(ctx, "claim "+kind+" tasks on queue "+queue)
		errBackoff = 100 * time.Millisecond
		for _, t := range tasks {
			p.start(t)
		}
		if len(tasks) == free {
			continue // there may be more
		}
		wait := e.opts.PollInterval
		// Sleep until the next task comes due; one due already that the
		// claim left is of a type this worker does not have.
		if due, ok, err := e.store.NextDue(ctx, kind, queue); err == nil && ok {
			if left := due.Sub(e.now()); left > 0 {
				wait = min(wait, left)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-w.c:
		case <-t.C:
		}
		t.Stop()
	}
}

// dbHealth logs database outages as the engine's background loops see
// them: once, at Warn, when the first loop fails; at Debug for each retry of
// any loop after that; and once, at Info, when one works again. Without it
// every loop (the pollers of each queue, the timer scanner, the
// notification listener and sender) would log every retry of every outage.
// A killed connection is an outage that lasts one retry.
type dbHealth struct {
	log  *slog.Logger
	down atomic.Bool // fast path for ok

	mu       sync.Mutex
	since    time.Time
	failures int
}

// fail records that what failed with err and is retried in retryIn.
func (d *dbHealth) fail(ctx context.Context, what string, err error, retryIn time.Duration) {
	d.mu.Lock()
	first := !d.down.Load()
	if first {
		d.down.Store(true)
		d.since, d.failures = time.Now(), 0
	}
	d.failures++
	d.mu.Unlock()
	attrs := []slog.Attr{slog.String("op", what), slog.String("error", err.Error()), slog.Duration("retry_in", retryIn)}
	if first {
		d.log.LogAttrs(ctx, slog.LevelWarn, "database unreachable; background work retries with backoff until it answers (retries are logged at Debug)", attrs...)
		return
	}
	d.log.LogAttrs(ctx, slog.LevelDebug, "database still unreachable", attrs...)
}

// ok records that what worked: if the database was down, the outage is over.
func (d *dbHealth) ok(ctx context.Context, what string) {
	if !d.down.Load() {
		return
	}
	d.mu.Lock()
	if !d.down.Load() {
		d.mu.Unlock()
		return
	}
	d.down.Store(false)
	since, n := d.since, d.failures
	d.mu.Unlock()
	d.log.LogAttrs(ctx, slog.LevelInfo, "database reachable again", slog.String("op", what),
		slog.Duration("outage", time.Since(since)), slog.Int("failures", n))
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
