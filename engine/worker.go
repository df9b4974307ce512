package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("engine: Run called while already running")
	}
	defer e.running.Store(false)
	e.hub.acquire()
	defer e.hub.release()

	// hard is what running tasks see: it ends ShutdownTimeout after ctx.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()

	var wg sync.WaitGroup
	scanner := timer.NewScanner(e.store, timer.Options{
		NowFunc: e.opts.NowFunc, PollInterval: e.opts.PollInterval, Logger: e.log,
		OnFire: func(f timer.Fired) {
			e.announce(store.Ready{WorkflowQueues: f.Queues})
		},
	})
	tw := e.hub.wake("t:", func() bool { return true })
	defer e.hub.unwake("t:", tw)
	wg.Add(2)
	go func() {
		defer wg.Done()
		scanner.Run(ctx)
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
	for queue, qo := range e.opts.Queues {
		wg.Add(2)
		go func() {
			defer wg.Done()
			pollLoop(ctx, hard, e, "workflow", queue, qo.WorkflowConcurrency, e.claimWorkflowTasks, e.processWorkflowTask)
		}()
		go func() {
			defer wg.Done()
			pollLoop(ctx, hard, e, "activity", queue, qo.ActivityConcurrency, e.claimActivityTasks, e.runActivityTask)
		}()
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "engine running", slog.String("worker", e.opts.WorkerID), slog.Int("queues", len(e.opts.Queues)))
	<-ctx.Done()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
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
	e.log.LogAttrs(rctx, slog.LevelInfo, "engine stopped", slog.String("worker", e.opts.WorkerID))
	return nil
}

// pollLoop claims tasks of one kind on one queue whenever it has free slots
// and there is work, and runs each in its own goroutine. It returns when ctx
// is done and every task it started has finished. Tasks run with hard, which
// outlives ctx by the shutdown timeout.
func pollLoop[T any](ctx, hard context.Context, e *Engine, kind, queue string, slots int,
	claim func(ctx context.Context, queue string, n int) ([]T, error), work func(ctx context.Context, t T)) {
	sem := make(chan struct{}, slots)
	key := kind[:1] + ":" + queue
	w := e.hub.wake(key, func() bool { return len(sem) < cap(sem) })
	defer e.hub.unwake(key, w)
	var wg sync.WaitGroup
	defer wg.Wait()
	errBackoff := 100 * time.Millisecond
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := 1
	more:
		for free < slots {
			select {
			case sem <- struct{}{}:
				free++
			default:
				break more
			}
		}
		// A claim that commits must not be lost to a cancelled context, so
		// claims are not cut short by ctx; they are short.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		tasks, err := claim(cctx, queue, free)
		cancel()
		for range free - len(tasks) {
			<-sem
		}
		if err != nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "claim failed; retrying", slog.String("kind", kind),
				slog.String("queue", queue), slog.String("error", err.Error()))
			if !sleepCtx(ctx, errBackoff) {
				return
			}
			errBackoff = min(2*errBackoff, 5*time.Second)
			continue
		}
		errBackoff = 100 * time.Millisecond
		for _, t := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				work(hard, t)
			}()
		}
		if len(tasks) == free {
			continue // there may be more
		}
		wait := e.opts.PollInterval
		if due, ok, err := e.store.NextDue(ctx, kind, queue); err == nil && ok {
			wait = min(wait, max(due.Sub(e.now()), time.Millisecond))
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
