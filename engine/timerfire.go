package engine

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/internal/workers"
)

// Timers come due two ways.
//
// A run this engine keeps in its cache wakes here: when a commit starts a
// timer that fires soon (a short sleep stays cached, see keepCached), the
// engine notes it (wakeups), and when the scanner finds it due, the cached
// run applies TimerFired, runs, and the firing and its commands are one
// fused commit (store.Outcome.TimerSeq), like an activity's fused step.
// The timer's row stays in the table meanwhile: if this engine stops, or
// the run leaves its cache, the scanner fires it as usual; a fire by
// another engine moves the run on, and the fused commit is refused.
//
// Every other due timer is fired by the scanner's statement, which claims
// the tasks it makes for this engine's free workflow slots and hands them
// over with the TimerFired events: a run cached here then wakes without a
// claim or a history read. The tasks it could not take stay ready for any
// worker.

// wakeups are the soon-due timers of runs this engine has cached, earliest
// first, and the runs being woken now, whose timers the scanner leaves
// alone, each with the timers of the run that came due meanwhile.
type wakeups struct {
	mu       sync.Mutex
	due      wakeHeap
	noted    map[string]int // timers in due, by run
	inflight map[string][]wakeup
}

type wakeup struct {
	runID string
	seq   int64
	at    time.Time
}

type wakeHeap []wakeup

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wakeup)) }
func (h *wakeHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// push adds timers to wake.
func (w *wakeups) push(ws []wakeup) {
	if len(ws) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.noted == nil {
		w.noted = map[string]int{}
	}
	for _, x := range ws {
		heap.Push(&w.due, x)
		w.noted[x.runID]++
	}
}

// clear forgets every timer: the cache they were for is gone.
func (w *wakeups) clear() {
	w.mu.Lock()
	w.due, w.noted = nil, nil
	w.mu.Unlock()
}

// popDue removes and returns the timers due at now.
func (w *wakeups) popDue(now time.Time) []wakeup {
	w.mu.Lock()
	defer w.mu.Unlock()
	var due []wakeup
	for len(w.due) > 0 && !w.due[0].at.After(now) {
		x := heap.Pop(&w.due).(wakeup)
		if w.noted[x.runID]--; w.noted[x.runID] <= 0 {
			delete(w.noted, x.runID)
		}
		due = append(due, x)
	}
	return due
}

// pending reports whether a timer of run runID is to be woken here: the run
// is worth keeping in the cache.
func (w *wakeups) pending(runID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.noted[runID] > 0 || w.inflight[runID] != nil // noted, or held for after its wake
}

// begin and end bracket the wake of run runID (one at a time: the wake has
// the run out of the cache); end returns the run's timers that came due
// meanwhile (see hold). waking lists the runs being woken.
func (w *wakeups) begin(runID string) {
	w.mu.Lock()
	if w.inflight == nil {
		w.inflight = map[string][]wakeup{}
	}
	w.inflight[runID] = nil
	w.mu.Unlock()
}

func (w *wakeups) end(runID string) []wakeup {
	w.mu.Lock()
	defer w.mu.Unlock()
	later := w.inflight[runID]
	delete(w.inflight, runID)
	return later
}

// hold keeps x, a timer of a run being woken, for after that wake, and
// reports whether it did; a run not being woken is the scanner's.
func (w *wakeups) hold(x wakeup) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	later, ok := w.inflight[x.runID]
	if ok {
		w.inflight[x.runID] = append(later, x)
	}
	return ok
}

func (w *wakeups) waking() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	runs := make([]string, 0, len(w.inflight))
	for r := range w.inflight {
		runs = append(runs, r)
	}
	return runs
}

// timerFirer is the timer scanner's store (see above). rescan makes the
// scanner look again: a wake that did not take effect leaves its timer to
// the scanner.
type timerFirer struct {
	e      *Engine
	rescan func()
	// peeked is FireTimers' look at the next timer, when it fired nothing,
	// for the scanner's NextTimer that follows: anything that would make
	// the answer sooner (a new timer, a wake that ends) wakes the scanner.
	peeked *nextTimer
}

type nextTimer struct {
	at time.Time
	ok bool
}

// FireTimers implements timer.Store.
func (f *timerFirer) FireTimers(ctx context.Context, now time.Time, limit int) (store.Fired, error) {
	e := f.e
	f.peeked = nil
	// At the database's precision, as the events' times will read back.
	now = now.Truncate(time.Microsecond)
	for _, w := range e.wakes.popDue(now) {
		f.wake(ctx, w, now)
	}
	in := store.FireTimersParams{Now: now, Limit: limit, Skip: e.wakes.waking()}
	// In a burst of wakes most rounds find nothing due but the runs being
	// woken; a look at the earliest other timer costs a tenth of a fire.
	if at, ok, err := e.store.NextTimer(ctx, in.Skip); err == nil && (!ok || at.After(now)) {
		f.peeked = &nextTimer{at: at, ok: ok}
		return store.Fired{}, nil
	}
	reserved := map[string]*workers.Pool[store.WorkflowTask]{}
	if ps := e.pools.Load(); ps != nil {
		in.Claim = map[string]int{}
		for queue, p := range ps.wf {
			if n := p.TryAcquireUpTo(limit); n > 0 {
				in.Claim[queue], reserved[queue] = n, p
			}
		}
		if types := e.registered(true); len(in.Claim) > 0 && len(types) > 0 {
			in.ClaimAs, in.Lease, in.Types = e.opts.WorkerID, e.opts.WorkflowTaskLease, types
		}
	}
	fired, tasks, err := e.store.FireTimers(ctx, in)
	for _, t := range tasks {
		reserved[t.Queue].Start(t)
		in.Claim[t.Queue]--
	}
	for queue, p := range reserved {
		p.ReleaseN(in.Claim[queue])
	}
	return fired, err
}

// NextTimer implements timer.Store: the next timer that is not being woken.
func (f *timerFirer) NextTimer(ctx context.Context) (time.Time, bool, error) {
	if p := f.peeked; p != nil {
		f.peeked = nil
		return p.at, p.ok, nil
	}
	return f.e.store.NextTimer(ctx, f.e.wakes.waking())
}

// wake starts the fused wake of w's run in a wake slot, if the run is in
// the cache and a slot is free; otherwise the scanner fires it.
func (f *timerFirer) wake(ctx context.Context, w wakeup, now time.Time) {
	e := f.e
	ps := e.pools.Load()
	if ps == nil {
		return
	}
	x, t := e.cache.Take(w.runID)
	if x == nil {
		e.wakes.hold(w) // the run may be out for its wake of another timer
		return
	}
	if !x.TimerPending(w.seq) { // canceled (a deadline met), or fired elsewhere and applied
		e.cache.Put(t, x, time.Time{})
		return
	}
	// In a burst the scanner waits for a wake slot rather than leave the
	// run to a fire, a claim and a history read, which cost more than the
	// wait: the slots free up as fast as the wakes commit.
	if !ps.wake.AcquireWithin(ctx, wakeSlotWait) {
		e.cache.Put(t, x, w.at) // if it is not kept, the scanner fires the timer
		return
	}
	e.wakes.begin(w.runID)
	ps.wake.Start(wakeJob{x: x, task: t, w: w, lag: now.Sub(w.at)})
}

// wakeSlotWait is how long the scanner waits for a wake slot.
const wakeSlotWait = 100 * time.Millisecond

// wakeJob is a fused wake for the wake slots.
type wakeJob struct {
	x    wfexec.Executor
	task store.WorkflowTask
	w    wakeup
	lag  time.Duration
}

// runWake is the wake slots' work.
func (f *timerFirer) runWake(ctx context.Context, j wakeJob, _ *workers.Slot) *wakeJob {
	e := f.e
	woke := e.wakeCached(ctx, j.x, j.task, j.w.seq)
	later := e.wakes.end(j.w.runID)
	if woke {
		e.observeFire(ctx, store.FiredTimer{RunID: j.w.runID, Seq: j.w.seq, Lag: j.lag, TraceContext: j.task.TraceContext})
		e.wakes.push(later) // the run is back in the cache for them
	}
	// The scanner skipped the run's timers while it was woken: this one if
	// the wake did not take, those held for after it, and any other that
	// came due meanwhile. It looks again.
	f.rescan()
	return nil
}

// observeFire records a fired timer: its lag, and a span in its run's trace.
func (e *Engine) observeFire(ctx context.Context, t store.FiredTimer) {
	e.metrics.timerLag.Observe(t.Lag.Seconds())
	_, span := e.startSpan(ctx, t.TraceContext, "durable.timer_fire",
		attribute.String("durable.run.id", t.RunID), attribute.Int64("durable.timer.seq", t.Seq),
		attribute.Float64("durable.timer.lag_seconds", t.Lag.Seconds()))
	span.End()
}

// wakeCached runs the cached run x (its last task t) past the firing of its
// timer seq and commits the step fused. It reports whether the step took
// effect; if not, x is closed and the timer left to the scanner.
func (e *Engine) wakeCached(ctx context.Context, x wfexec.Executor, t store.WorkflowTask, seq int64) bool {
	f := &fusedOutcome{timerSeq: seq, event: history.Event{Attributes: history.TimerFired{Seq: seq}},
		attrs: []slog.Attr{slog.String("run_id", t.RunID), slog.Int64("timer_seq", seq)}}
	handled, _, _ := e.stepFused(ctx, x, t, f, func(s step) (*store.WorkflowTask, bool) {
		// A wake whose commands a fused statement does not cover (a child,
		// a cancellation...) is dropped: the scanner fires the timer and
		// the run goes on from its history.
		s.x.ReleaseLogs(false)
		s.x.Close()
		return nil, false
	})
	return handled
}
