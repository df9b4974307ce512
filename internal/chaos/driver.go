package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/engine"
)

// The driver is the client's side of the workload: it starts each
// workflow, signals it and waits for its result, recording in the rig's
// tables what it did and what each call answered. Every call is retried
// until it works: the database may be down or the connection killed.

// drive runs workflow seq, of a kind its seed picks.
func (r *rig) drive(ctx context.Context, seq int) {
	rng := rand.New(rand.NewPCG(r.o.Seed, uint64(seq)+2))
	id := fmt.Sprintf("chaos-%06d", seq)
	roll := rng.IntN(100)
	if i := seq - 1; i >= 0 && i < len(firstRolls) { // seq counts from 1
		roll = firstRolls[i]
	}
	switch {
	case roll < 12:
		r.driveDrain(ctx, rng, seq, id)
	case roll < 16:
		r.driveFail(ctx, rng, seq, id)
	case roll < 26:
		r.driveVersioned(ctx, rng, seq, id)
	default:
		r.driveFlow(ctx, rng, seq, id)
	}
}

// firstRolls are the kinds of the first workflows (as rolls of drive's
// switch): every kind, Fail twice, so that a short run checks each of
// them (one Fail in 25 is drawn otherwise, and a Fail whose attempts all
// end by faults checks nothing).
var firstRolls = []int{12, 0, 13, 16, 26}

// record notes a workflow the driver is about to start; false if ctx ended.
func (r *rig) record(ctx context.Context, id string, kind Kind, in any) bool {
	raw, err := json.Marshal(in)
	if err != nil {
		r.violate("rig: encode input: %v", err)
		return false
	}
	return r.retry(ctx, func(ctx context.Context) error {
		_, err := r.pool.Exec(ctx, `INSERT INTO chaos_workflows (workflow_id, kind, input) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, id, kind, raw)
		return err
	})
}

// started notes that the run of id is open, until the returned func.
func (r *rig) opened(id string) func() {
	r.started.Add(1)
	r.open.Store(id, true)
	return func() { r.open.Delete(id) }
}

// driveFlow runs a Flow: start it, send its signals (and, one time in
// six, one from the engine with the wrong payload key first), wait.
func (r *rig) driveFlow(ctx context.Context, rng *rand.Rand, seq int, id string) {
	in := newInput(rng, seq)
	wrongKey := r.o.WrongKeySignals && rng.IntN(6) == 0
	if !r.record(ctx, id, KindFlow, in) {
		return
	}
	var run *engine.Run[FlowResult]
	if !r.retry(ctx, func(ctx context.Context) error {
		var err error
		run, err = engine.Start(ctx, r.e, r.w.Flow, in, engine.StartOptions{ID: id})
		return err
	}) {
		return
	}
	defer r.opened(id)()
	if wrongKey && r.signalWithWrongKey(ctx, id) {
		r.finished.Add(1)
		return
	}
	for i, v := range in.Signals {
		sleepCtx(ctx, time.Duration(rng.IntN(400))*time.Millisecond)
		if !r.retry(ctx, func(ctx context.Context) error {
			err := engine.Signal(ctx, r.e, id, signalName, Signal{Index: i, Value: v})
			if errors.Is(err, engine.ErrRunClosed) || errors.Is(err, engine.ErrRunNotFound) {
				r.violate("workflow %s: signal %d: %v (the run waits for every signal, so it must be open)", id, i, err)
				return nil
			}
			return err
		}) {
			return
		}
	}
	if waitResult(ctx, r, run) {
		r.finished.Add(1)
	}
}

// signalWithWrongKey sends id a signal from an engine whose payload key
// is not the workers': the engine must refuse it (the workers could not
// read it, and the run would wedge). It returns true if the signal was
// accepted: the run is then terminated (and recorded so), a violation.
func (r *rig) signalWithWrongKey(ctx context.Context, id string) bool {
	r.wrongKeySent.Add(1)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := engine.Signal(cctx, r.wrongE, id, signalName, Signal{Index: 99, Value: 1})
		cancel()
		switch {
		case err == nil:
			r.wrongKeyAccepted.Add(1)
			r.violate("workflow %s: a signal from an engine with the wrong payload key was accepted (the workers cannot decode it); the rig terminates the run", id)
			r.terminate(ctx, id, "chaos: a signal nobody can decode was accepted")
			return true
		case ctx.Err() != nil:
			return false
		case dbErrorText(err.Error()) || errors.Is(err, context.DeadlineExceeded):
			r.clientErrs.Add(1)
			sleepCtx(ctx, backoff)
		case !errors.Is(err, engine.ErrCodecMismatch):
			r.violate("workflow %s: a signal from an engine with the wrong payload key was refused with %q, which is not engine.ErrCodecMismatch", id, err)
			return false
		default:
			r.wrongKeyRefused.Add(1)
			r.mu.Lock()
			if r.wrongKeyExample == "" {
				r.wrongKeyExample = err.Error()
			}
			r.mu.Unlock()
			return false
		}
	}
}

// terminate terminates id on purpose and records it; ErrRunClosed counts
// as done (a retry after a terminate that committed).
func (r *rig) terminate(ctx context.Context, id, reason string) (closedBefore bool) {
	tried := false
	r.retry(ctx, func(ctx context.Context) error {
		err := r.e.Terminate(ctx, id, reason)
		if errors.Is(err, engine.ErrRunClosed) {
			closedBefore = !tried
			return nil
		}
		tried = true
		return err
	})
	r.retry(ctx, func(ctx context.Context) error {
		_, err := r.pool.Exec(ctx, `UPDATE chaos_workflows SET terminated = true WHERE workflow_id = $1`, id)
		return err
	})
	return closedBefore
}

// waitResult waits for run's result; false if ctx ended first. A failed
// run is a result too (the checker judges it).
func waitResult[Out any](ctx context.Context, r *rig, run *engine.Run[Out]) bool {
	for {
		_, err := run.Result(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var we *engine.WorkflowError
		if errors.As(err, &we) {
			return true
		}
		// A waiter that gives up on a database error: count it, wait again.
		if r.waitErrs.Add(1) == 1 {
			r.mu.Lock()
			r.waitErrExample = err.Error()
			r.mu.Unlock()
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// driveDrain starts a Drain with SignalWithStart (signal 0), then sends
// its other signals at random moments around its closing task, recording
// how each Signal call ended.
func (r *rig) driveDrain(ctx context.Context, rng *rand.Rand, seq int, id string) {
	in := DrainInput{Seq: seq, Activity: rng.IntN(2) == 0, WorkMS: 20 + rng.IntN(80), Signals: 2 + rng.IntN(4)}
	delays := make([]time.Duration, in.Signals)
	for i := range delays {
		delays[i] = time.Duration(rng.IntN(in.WorkMS+150)) * time.Millisecond
	}
	if !r.record(ctx, id, KindDrain, in) {
		return
	}
	var (
		run   *engine.Run[DrainResult]
		tried bool
	)
	if !r.retry(ctx, func(ctx context.Context) error {
		if tried {
			// The first try may have committed and the run closed since:
			// a second SignalWithStart would start a second run.
			got, err := engine.GetRun[DrainResult](ctx, r.e, id)
			if err == nil {
				run = got
				return nil
			}
			if !errors.Is(err, engine.ErrRunNotFound) {
				return err
			}
		}
		tried = true
		var err error
		run, err = engine.SignalWithStart(ctx, r.e, r.w.Drain, in, engine.StartOptions{ID: id}, drainSignal, Signal{Index: 0, Value: 1})
		return err
	}) {
		return
	}
	defer r.opened(id)()
	r.noteSignal(ctx, id, 0, "accepted") // with the start, in one transaction
	var sends sync.WaitGroup
	for i, d := range delays {
		sends.Go(func() {
			if !sleepCtx(ctx, d) {
				return
			}
			outcome, failed := "", false
			r.retry(ctx, func(ctx context.Context) error {
				err := engine.Signal(ctx, r.e, id, drainSignal, Signal{Index: i + 1, Value: 1})
				switch {
				case err == nil:
					outcome = "accepted"
				case errors.Is(err, engine.ErrRunClosed) && failed:
					outcome = "ambiguous" // the failed try may have committed
				case errors.Is(err, engine.ErrRunClosed):
					outcome = "closed"
				default:
					failed = true
					return err
				}
				return nil
			})
			if outcome != "" {
				r.noteSignal(ctx, id, i+1, outcome)
			}
		})
	}
	sends.Wait()
	if waitResult(ctx, r, run) {
		r.finished.Add(1)
	}
}

// noteSignal records how a Signal call ended.
func (r *rig) noteSignal(ctx context.Context, id string, idx int, outcome string) {
	r.retry(ctx, func(ctx context.Context) error {
		_, err := r.pool.Exec(ctx, `INSERT INTO chaos_signals (workflow_id, idx, outcome) VALUES ($1, $2, $3)`, id, idx, outcome)
		return err
	})
}

// driveFail runs a Fail, which must end failed.
func (r *rig) driveFail(ctx context.Context, rng *rand.Rand, seq int, id string) {
	in := FailInput{Seq: seq, Mode: failModes[rng.IntN(len(failModes))]}
	if !r.record(ctx, id, KindFail, in) {
		return
	}
	var run *engine.Run[int64]
	if !r.retry(ctx, func(ctx context.Context) error {
		var err error
		run, err = engine.Start(ctx, r.e, r.w.Fail, in, engine.StartOptions{ID: id})
		return err
	}) {
		return
	}
	defer r.opened(id)()
	if waitResult(ctx, r, run) {
		r.finished.Add(1)
	}
}

// maxWaitingUpgrade bounds the versioned runs that wait for the upgrade
// at once (they hold in-flight slots meanwhile).
const maxWaitingUpgrade = 4

// driveVersioned runs a Versioned. Started shortly before the upgrade, it
// waits for it after its first iteration: the driver signals it once
// every worker runs the second generation of the code.
func (r *rig) driveVersioned(ctx context.Context, rng *rand.Rand, seq int, id string) {
	in := VersionedInput{Seq: seq, Iterations: 3 + rng.IntN(3)}
	if r.o.UpgradeAt > 0 && !r.isUpgraded() && time.Until(r.began.Add(r.o.UpgradeAt)) < 10*time.Second {
		if r.waitingUpgrade.Add(1) <= maxWaitingUpgrade {
			in.WaitUpgrade = true
			defer r.waitingUpgrade.Add(-1)
		} else {
			r.waitingUpgrade.Add(-1)
		}
	}
	if !r.record(ctx, id, KindVersioned, in) {
		return
	}
	var run *engine.Run[VersionedResult]
	if !r.retry(ctx, func(ctx context.Context) error {
		var err error
		run, err = engine.Start(ctx, r.e, r.w.Versioned, in, engine.StartOptions{ID: id})
		return err
	}) {
		return
	}
	defer r.opened(id)()
	if in.WaitUpgrade {
		select {
		case <-r.upgraded:
		case <-ctx.Done():
			return
		}
		if !r.retry(ctx, func(ctx context.Context) error {
			err := engine.Signal(ctx, r.e, id, upgradeSignal, 1)
			if errors.Is(err, engine.ErrRunClosed) || errors.Is(err, engine.ErrRunNotFound) {
				r.violate("workflow %s: upgrade signal: %v (the run waits for it, so it must be open)", id, err)
				return nil
			}
			return err
		}) {
			return
		}
	}
	if waitResult(ctx, r, run) {
		r.finished.Add(1)
	}
}

func (r *rig) isUpgraded() bool {
	select {
	case <-r.upgraded:
		return true
	default:
		return false
	}
}

// upgradeWorkers waits until UpgradeAt and then upgrades every worker to
// the second generation of the workflow code: it kills each process and
// starts it again, and every process started from then on runs the new
// code too. Killing them all first leaves no old process to take a run
// back to the old code.
func (r *rig) upgradeWorkers(ctx context.Context) {
	if r.o.UpgradeAt <= 0 || !sleepCtx(ctx, time.Until(r.began.Add(r.o.UpgradeAt))) {
		return
	}
	r.gen.Store(2)
	var killed []*worker
	for _, w := range r.workers {
		at := time.Now()
		if pid := w.kill(false); pid != 0 {
			r.faults.add(Fault{Kind: FaultUpgrade, PID: pid, At: at, Until: time.Now()})
			killed = append(killed, w)
		}
	}
	for _, w := range killed {
		if err := w.start(); err != nil {
			r.violate("rig: restart worker %d for the upgrade: %v", w.slot, err)
		}
	}
	r.o.Logf("chaos: workers upgraded to the second generation of the workflow code")
	close(r.upgraded)
}

// spinWait bounds each wait of a never-yielding run's driver.
const spinWait = time.Minute

// startSpins starts a never-yielding run every SpinEvery or so until ctx
// ends; each is driven (to its termination) under drivers with driveCtx.
func (r *rig) startSpins(ctx, driveCtx context.Context, drivers *sync.WaitGroup) {
	if r.o.SpinEvery <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(r.o.Seed, 1<<40))
	jitter := func(d time.Duration) time.Duration { return d/2 + time.Duration(rng.Int64N(int64(d))) }
	for n, wait := 1, jitter(r.o.SpinEvery/2); sleepCtx(ctx, wait); n, wait = n+1, jitter(r.o.SpinEvery) {
		drivers.Go(func() { r.driveSpin(driveCtx, n) })
	}
}

// driveSpin runs a Spin: it waits for the deadlock error to show on the
// run, then for other workflows to complete meanwhile, and terminates it.
// The checker then makes sure nothing of it was written after that.
func (r *rig) driveSpin(ctx context.Context, n int) {
	id := fmt.Sprintf("chaos-spin-%04d", n)
	in := SpinInput{Seq: n, SpinMS: int((r.deadlockTimeout() + r.o.Lease/2) / time.Millisecond)}
	if !r.record(ctx, id, KindSpin, in) {
		return
	}
	if !r.retry(ctx, func(ctx context.Context) error {
		_, err := engine.Start(ctx, r.e, r.w.Spin, in, engine.StartOptions{ID: id})
		return err
	}) {
		return
	}
	r.spins.Add(1)
	before, at := r.finished.Load(), time.Now()
	var lastErr string
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := r.e.Describe(dctx, id)
		cancel()
		if err == nil {
			lastErr = info.TaskError
			if strings.Contains(info.TaskError, "deadlock") {
				r.spinDeadlocks.Add(1)
				break
			}
		}
		if time.Since(at) > spinWait {
			r.violate("workflow %s: code that never yields, and no deadlock error on its task after %s (task error %q)", id, spinWait, lastErr)
			break
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return
		}
	}
	// Other runs keep completing meanwhile: the spinning code holds no
	// worker for good.
	for r.finished.Load() < before+3 && r.started.Load() > r.finished.Load() {
		if time.Since(at) > 2*spinWait {
			r.violate("workflow %s: while its code spun, %d other workflows completed in %s", id, r.finished.Load()-before, 2*spinWait)
			break
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return
		}
	}
	if r.terminate(ctx, id, "chaos: the code never yields") {
		r.violate("workflow %s: code that never yields closed its run before the driver terminated it", id)
	}
	r.spinsTerminated.Add(1)
}

// describeOpen describes a few of the workflows still open, for the report.
func (r *rig) describeOpen(ctx context.Context) string {
	var b strings.Builder
	n := 0
	r.open.Range(func(k, _ any) bool {
		id := k.(string)
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := r.e.Describe(dctx, id)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "\n  %s: describe: %v", id, err)
		} else {
			fmt.Fprintf(&b, "\n  %s: run %s %s, %d events, task error %q (%d attempts), pending activities %+v, pending timers %+v",
				id, info.RunID, info.Status, info.LastEventID, info.TaskError, info.TaskAttempts, info.PendingActivities, info.PendingTimers)
		}
		n++
		return n < 5
	})
	return b.String()
}

// retry calls fn until it succeeds, backing off; false if ctx ended.
func (r *rig) retry(ctx context.Context, fn func(context.Context) error) bool {
	backoff := 50 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.clientErrs.Add(1)
		if !sleepCtx(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, time.Second)
	}
}
