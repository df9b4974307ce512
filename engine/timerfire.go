package engine

import (
	"context"
	"time"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/timer"
)

// timerFirer is the timer scanner's store: a fire claims the workflow tasks
// it makes for this engine, as many as its workflow slots have room for,
// and runs them at once with the TimerFired events it appended. A run
// cached here then wakes without a claim or a history read; the tasks it
// could not take stay ready for any worker.
type timerFirer struct{ e *Engine }

// FireTimers implements timer.Store.
func (f timerFirer) FireTimers(ctx context.Context, now time.Time, limit int) (timer.Fired, error) {
	e := f.e
	// At the database's precision, as the events' times will read back.
	in := store.FireTimersParams{Now: now.Truncate(time.Microsecond), Limit: limit}
	reserved := map[string]*workerPool[store.WorkflowTask]{}
	if ps := e.pools.Load(); ps != nil {
		in.Claim = map[string]int{}
		for queue, p := range ps.wf {
			n := 0
			for n < limit && p.tryAcquire() {
				n++
			}
			if n > 0 {
				in.Claim[queue], reserved[queue] = n, p
			}
		}
		if types := e.registered(true); len(in.Claim) > 0 && len(types) > 0 {
			in.ClaimAs, in.Lease, in.Types = e.opts.WorkerID, e.opts.WorkflowTaskLease, types
		}
	}
	fired, tasks, err := e.store.FireTimersClaiming(ctx, in)
	for _, t := range tasks {
		reserved[t.Queue].start(t)
		in.Claim[t.Queue]--
	}
	for queue, p := range reserved {
		for range in.Claim[queue] {
			p.release()
		}
	}
	return fired, err
}

// NextTimer implements timer.Store.
func (f timerFirer) NextTimer(ctx context.Context) (time.Time, bool, error) {
	return f.e.store.NextTimer(ctx)
}
